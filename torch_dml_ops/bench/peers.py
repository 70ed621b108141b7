"""Other libraries' GatherND / ScatterND / TopK, run on the same inputs in the same process.

Each peer is optional (``pip install -e ".[bench]"`` installs them all); one that does not import
is skipped and the report says why.  Peers run on the CPU, with the thread count torch uses, on
inputs converted once to their own array type (outside the timing).  Results are converted back
to torch tensors only for the agreement check.

* onnxruntime: one-node ONNX models (opset 18) on the CPU execution provider, ``session.run``,
  with thread spinning off and, as "(spinning)", on (its default; see ``OnnxRuntime._session``);
* TensorFlow: ``tf.gather_nd``, ``tf.tensor_scatter_nd_update``, ``tf.math.top_k`` in
  ``tf.function`` (graph mode, no XLA);
* JAX: ``jax.jit`` of ``x[i0, i1, ...]``, ``x.at[i0, ...].set(u)``, ``jax.lax.top_k`` (XLA), with
  ``jax_enable_x64`` so the int64 indices stay int64 (JAX truncates them to int32 otherwise).

TensorFlow and JAX have no smallest-k: it is ``top_k(-x)`` with the values negated back (exact
for the finite data benchmarked here).
"""
from __future__ import annotations

import os
from typing import Dict, List, Tuple

import numpy as np
import torch

from .core import Inputs, Provider

PEER_NAMES = ("onnxruntime", "tensorflow", "jax")


def _np(d: Inputs, key: str) -> np.ndarray:
    """A numpy view of input ``key`` (CPU tensors share their memory)."""
    cache = d.setdefault("_np", {})
    if key not in cache:
        cache[key] = d[key].detach().cpu().contiguous().numpy()
    return cache[key]


def _from_np(a) -> torch.Tensor:
    return torch.from_numpy(np.array(a, copy=True))


def _pair(r) -> Tuple[torch.Tensor, torch.Tensor]:
    return _from_np(r[0]), _from_np(r[1])


class Peer:
    name = ""
    version = ""

    def providers(self, op: str, spec: Dict[str, object]) -> List[Provider]:
        raise NotImplementedError


class OnnxRuntime(Peer):
    name = "onnxruntime"

    def __init__(self, threads: int):
        import onnx
        import onnxruntime as ort
        from onnx import TensorProto, helper
        self.version = ort.__version__
        self._ort, self._helper, self._tp, self._onnx = ort, helper, TensorProto, onnx
        self._threads = threads
        self._sessions: Dict[Tuple, object] = {}

    def _session(self, key, node, inputs, outputs, arena: bool = True, spinning: bool = False):
        key = key + (arena, spinning)
        if key not in self._sessions:
            h = self._helper
            graph = h.make_graph([node], "bench", inputs, outputs)
            # IR 9 / opset 18: what every onnxruntime of the last years loads
            model = h.make_model(graph, opset_imports=[h.make_opsetid("", 18)], ir_version=9)
            so = self._ort.SessionOptions()
            so.intra_op_num_threads = self._threads
            so.inter_op_num_threads = 1
            so.log_severity_level = 3
            # onnxruntime's idle workers spin for tens of ms after each run by default, which
            # makes batched calls faster and slows whatever runs next in the process (up to 1.8x
            # measured on top_k).  Both are timed: the spinning session in its own blocks with a
            # pause after each (Provider.pause_after), and the tables rank us against the better.
            so.add_session_config_entry("session.intra_op.allow_spinning",
                                        "1" if spinning else "0")
            # The arena (default) keeps freed buffers and hands them out again: an output of the
            # same size is then never faulted in anew, which a torch op's fresh output is.
            so.enable_cpu_mem_arena = arena
            self._sessions[key] = self._ort.InferenceSession(
                model.SerializeToString(), so, providers=["CPUExecutionProvider"])
        return self._sessions[key]

    def _vi(self, name, dtype, shape=None):
        return self._helper.make_tensor_value_info(name, dtype, shape)

    def providers(self, op, spec):
        h, T = self._helper, self._tp
        if op in ("gather_nd", "scatter_nd"):
            # spec["no_arena"]: also a session without the memory arena (outputs in fresh memory,
            # like every torch op's), to show what the arena's reuse of output buffers is worth.
            out = []
            variants = [(True, False), (True, True)]
            if spec.get("no_arena"):
                variants.append((False, False))
            for arena, spinning in variants:
                if op == "gather_nd":
                    s = self._session(("gather",), h.make_node("GatherND", ["x", "i"], ["y"]),
                                      [self._vi("x", T.FLOAT), self._vi("i", T.INT64)],
                                      [self._vi("y", T.FLOAT)], arena, spinning)
                    fn = (lambda d, s=s:  # noqa: E731
                          s.run(None, {"x": _np(d, "x"), "i": _np(d, "idx")})[0])
                    name = "onnxruntime GatherND"
                else:
                    s = self._session(("scatter",),
                                      h.make_node("ScatterND", ["x", "i", "u"], ["y"]),
                                      [self._vi("x", T.FLOAT), self._vi("i", T.INT64),
                                       self._vi("u", T.FLOAT)], [self._vi("y", T.FLOAT)], arena,
                                      spinning)
                    fn = (lambda d, s=s:  # noqa: E731
                          s.run(None, {"x": _np(d, "x"), "i": _np(d, "idx"),
                                       "u": _np(d, "upd")})[0])
                    name = "onnxruntime ScatterND"
                label = name if arena else f"{name} (no arena)"
                out.append(Provider(label + (" (spinning)" if spinning else ""), fn, kind="peer",
                                    library=self.name, to_torch=_from_np,
                                    note=_ort_note(arena, spinning),
                                    pause_after=SPIN_PAUSE_S if spinning else 0.0))
            return out
        if op == "top_k1":
            largest = int(bool(spec["largest"]))
            out = []
            for spinning in (False, True):
                s = self._session(("topk", largest),
                                  h.make_node("TopK", ["x", "k"], ["v", "i"], axis=-1,
                                              largest=largest, sorted=1),
                                  [self._vi("x", T.FLOAT), self._vi("k", T.INT64, [1])],
                                  [self._vi("v", T.FLOAT), self._vi("i", T.INT64)],
                                  spinning=spinning)

                def fn(d, s=s):
                    k = d.setdefault("_ort_k", np.array([d["k"]], dtype=np.int64))
                    return s.run(None, {"x": _np(d, "x"), "k": k})
                out.append(Provider("onnxruntime TopK" + (" (spinning)" if spinning else ""), fn,
                                    kind="peer", library=self.name, to_torch=_pair,
                                    note=_ort_note(True, spinning),
                                    pause_after=SPIN_PAUSE_S if spinning else 0.0))
            return out
        return []


#: After each timed block of a spinning onnxruntime session: its workers spin for tens of ms
#: after a run and would slow the next provider's block.
SPIN_PAUSE_S = 0.1


def _ort_note(arena: bool, spinning: bool) -> str:
    notes = []
    if not arena:
        notes.append("enable_cpu_mem_arena=False")
    if spinning:
        notes.append("allow_spinning=1 (onnxruntime's default), own blocks, 100 ms pause after")
    return "; ".join(notes)


class TensorFlow(Peer):
    name = "tensorflow"

    def __init__(self, threads: int):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf
        try:
            tf.config.threading.set_intra_op_parallelism_threads(threads)
            tf.config.threading.set_inter_op_parallelism_threads(1)
        except RuntimeError:   # the runtime was already initialised by someone else
            pass
        self.version = tf.__version__
        self._tf = tf
        self._gather = tf.function(tf.gather_nd, reduce_retracing=True)
        self._scatter = tf.function(tf.tensor_scatter_nd_update, reduce_retracing=True)
        self._topk = tf.function(lambda x, k: tf.math.top_k(x, k, sorted=True),
                                 reduce_retracing=True)
        self._topk_min = tf.function(
            lambda x, k: (lambda r: (-r.values, r.indices))(tf.math.top_k(-x, k, sorted=True)),
            reduce_retracing=True)

    def _t(self, d: Inputs, key: str):
        cache = d.setdefault("_tf", {})
        if key not in cache:
            cache[key] = self._tf.constant(_np(d, key))
        return cache[key]

    def providers(self, op, spec):
        if op == "gather_nd":
            return [Provider("tf.gather_nd", lambda d: self._gather(self._t(d, "x"),
                                                                     self._t(d, "idx")),
                             kind="peer", library=self.name, to_torch=_from_np)]
        if op == "scatter_nd":
            return [Provider("tf.tensor_scatter_nd_update",
                             lambda d: self._scatter(self._t(d, "x"), self._t(d, "idx"),
                                                     self._t(d, "upd")),
                             kind="peer", library=self.name, to_torch=_from_np)]
        if op == "top_k1":
            f = self._topk if spec["largest"] else self._topk_min
            return [Provider("tf.math.top_k" + ("" if spec["largest"] else "(-x)"),
                             lambda d: tuple(f(self._t(d, "x"), d["k"])), kind="peer",
                             library=self.name, to_torch=_pair)]
        return []


class Jax(Peer):
    name = "jax"

    def __init__(self, threads: int):
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp  # noqa: F401
        self.version = jax.__version__
        self._jax = jax
        self._fns: Dict[Tuple, object] = {}

    def _a(self, d: Inputs, key: str):
        cache = d.setdefault("_jax", {})
        if key not in cache:
            cache[key] = self._jax.device_put(_np(d, key))
        return cache[key]

    def _jit(self, key, fn, **kw):
        if key not in self._fns:
            self._fns[key] = self._jax.jit(fn, **kw)
        return self._fns[key]

    def providers(self, op, spec):
        jax = self._jax
        if op == "gather_nd":
            k = int(spec["k"])
            f = self._jit(("gather", k), lambda x, i: x[tuple(i[:, j] for j in range(k))])
            return [Provider("jax x[i0, i1, ...]",
                             lambda d: f(self._a(d, "x"), self._a(d, "idx")).block_until_ready(),
                             kind="peer", library=self.name, to_torch=_from_np)]
        if op == "scatter_nd":
            k = int(spec["k"])
            f = self._jit(("scatter", k),
                          lambda x, i, u: x.at[tuple(i[:, j] for j in range(k))].set(u))
            return [Provider("jax x.at[...].set",
                             lambda d: f(self._a(d, "x"), self._a(d, "idx"),
                                         self._a(d, "upd")).block_until_ready(),
                             kind="peer", library=self.name, to_torch=_from_np)]
        if op == "top_k1":
            if spec["largest"]:
                f = self._jit(("topk",), lambda x, k: jax.lax.top_k(x, k), static_argnums=1)
            else:
                f = self._jit(("topk_min",),
                              lambda x, k: (lambda r: (-r[0], r[1]))(jax.lax.top_k(-x, k)),
                              static_argnums=1)

            def fn(d):
                v, i = f(self._a(d, "x"), d["k"])
                return v.block_until_ready(), i.block_until_ready()
            return [Provider("jax.lax.top_k" + ("" if spec["largest"] else "(-x)"), fn,
                             kind="peer", library=self.name, to_torch=_pair)]
        return []


_CLASSES = {"onnxruntime": OnnxRuntime, "tensorflow": TensorFlow, "jax": Jax}


def load_peers(names, threads: int) -> Tuple[List[Peer], Dict[str, str]]:
    """The peers that load here, and why the others do not."""
    peers, skipped = [], {}
    for name in names:
        try:
            peers.append(_CLASSES[name](threads))
        except Exception as e:  # noqa: BLE001  ImportError, or a broken install
            skipped[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    return peers, skipped


def hook(peers: List[Peer], device: str):
    """The ``peers(op, spec)`` callable the case builders take: peers run on the CPU only."""
    def providers(op: str, spec: Dict[str, object]) -> List[Provider]:
        if device != "cpu":
            return []
        out: List[Provider] = []
        for p in peers:
            out.extend(p.providers(op, spec))
        return out
    return providers


def versions(peers: List[Peer]) -> Dict[str, str]:
    return {p.name: p.version for p in peers}
