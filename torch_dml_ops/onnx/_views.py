"""Writes into views, exported as writes into their base.

``scatter_nd_(cache[l], tuples, updates)`` changes the rows of ``cache`` that the view's tuples
address.  Exported as it is written, torch's functionalization replays the view: a copy of the
view (Gather), the ScatterND, and a ScatterElements that puts the whole view back into the base,
per call; onnxruntime then moves the view twice per write.  The same write is a ScatterND into the
base whose tuples carry the view's fixed coordinates: ``(l, b, h, p)`` for the view's ``(b, h, p)``.

:func:`writes_on_bases` rewrites an ``ExportedProgram`` (torch.export's graph, before
functionalization) that way, for every ``scatter_nd_`` and ``gather_nd`` (``batch_dims=0``) whose
target is reached from a tensor through views that only move the tuples' dimensions:
``select``, ``slice`` (any start, end and step, symbolic bounds included), ``narrow``, ``unbind``
and ``permute``/``transpose`` of tuple dimensions, in any chain.  A view coordinate ``v`` of a
sliced dimension becomes ``arange(n)[slice][v]`` in the graph (negative ``v`` counts from the
view's end, as in eager; an out-of-range ``v`` stays out of range, so onnxruntime still refuses
it).  Then consecutive writes into one tensor become one (:func:`_merge`).  Anything else (a view
that moves a row dimension, the DML form, uint64 tuples, which int64 cannot hold) keeps torch's
view replay: exact, and slower.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

_aten = torch.ops.aten
_ops = torch.ops.torch_dml_ops

#: A view step, in the order the model applies them: (kind, arguments).
Step = Tuple[str, Tuple[Any, ...]]


def _arg(node: torch.fx.Node, schema: torch.FunctionSchema, name: str) -> Any:
    for i, a in enumerate(schema.arguments):
        if a.name == name:
            if i < len(node.args):
                return node.args[i]
            if name in node.kwargs:
                return node.kwargs[name]
            return a.default_value
    raise KeyError(name)


def _view_step(node: Any) -> Optional[Tuple[Any, Step]]:
    """(the tensor ``node`` is a view of, the step) for the views the rewrite follows."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return None
    t = node.target
    a: Any = node.args
    src: Any
    if t is _aten.select.int and isinstance(a[1], int) and isinstance(a[2], int):
        return a[0], ("select", (a[1], a[2]))
    if t is _aten.slice.Tensor:
        dim = a[1] if len(a) > 1 else node.kwargs.get("dim", 0)
        start = a[2] if len(a) > 2 else node.kwargs.get("start")
        end = a[3] if len(a) > 3 else node.kwargs.get("end")
        step = a[4] if len(a) > 4 else node.kwargs.get("step", 1)
        # start and end may be symbolic (a node computing a SymInt): base_tuples slices with them.
        if (isinstance(dim, int) and isinstance(step, int) and step > 0
                and all(v is None or isinstance(v, (int, torch.fx.Node)) for v in (start, end))):
            return a[0], ("slice", (dim, start, end, step))
    if (t is _aten.narrow.default and isinstance(a[1], int)
            and all(isinstance(v, (int, torch.fx.Node)) for v in a[2:4])):
        return a[0], ("narrow", (a[1], a[2], a[3]))
    if t is _aten.permute.default and all(isinstance(v, int) for v in a[1]):
        return a[0], ("permute", tuple(a[1]))
    if t is _aten.transpose.int and isinstance(a[1], int) and isinstance(a[2], int):
        return a[0], ("transpose", (a[1], a[2]))
    if t is operator.getitem and isinstance(a[1], int):
        src = a[0]
        if (isinstance(src, torch.fx.Node) and src.op == "call_function"
                and src.target is _aten.unbind.int):
            dim = src.args[1] if len(src.args) > 1 else src.kwargs.get("dim", 0)
            if isinstance(dim, int):
                return src.args[0], ("select", (dim, a[1]))
    return None


def _rank(node: Any) -> Optional[int]:
    val = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return val.dim() if isinstance(val, torch.Tensor) else None


def _walk(rank: int, steps: Sequence[Step], sliced: Callable[[int, Any, str, Tuple], Any],
          selected: Callable[[Any, Any], Any]) -> Optional[Tuple[List[Tuple[int, Any]], Dict]]:
    """Replay ``steps`` on a base of ``rank`` dimensions: the view's dimensions as (the base
    dimension, its coordinates: None while untouched, else what ``sliced`` made of them) and the
    base dimensions a select fixed (to what ``selected`` made of the coordinates and the index);
    None for a step whose dimensions are out of range."""
    dims: List[Tuple[int, Any]] = [(p, None) for p in range(rank)]
    fixed: Dict[int, Any] = {}
    for kind, args in steps:
        n = len(dims)
        if kind == "permute":
            perm = [p + n if p < 0 else p for p in args]
            if sorted(perm) != list(range(n)):
                return None
            dims = [dims[p] for p in perm]
            continue
        picked = [a + n if a < 0 else a for a in (args[:2] if kind == "transpose" else args[:1])]
        if not all(0 <= d < n for d in picked):
            return None
        if kind == "transpose":
            a, b = picked
            dims[a], dims[b] = dims[b], dims[a]
        elif kind == "select":
            p, coords = dims.pop(picked[0])
            fixed[p] = selected(coords, args[1])
        else:                                   # slice, narrow
            p, coords = dims[picked[0]]
            dims[picked[0]] = (p, sliced(p, coords, kind, args))
    return dims, fixed


def _plan(rank: int, steps: Sequence[Step], k: int) -> bool:
    """Whether tuples of size ``k`` on a base of ``rank`` dimensions seen through ``steps``
    address whole rows of the base: the view's dimensions from k on must be the base's last
    ones, neither moved nor sliced, and the first k with the fixed ones must be the base's
    first, in any order (they make the base's tuples, :func:`base_tuples`)."""
    walked = _walk(rank, steps, lambda p, coords, kind, args: True, lambda coords, i: None)
    if walked is None:
        return False
    dims, fixed = walked
    width = k + len(fixed)
    if not 0 <= k <= len(dims) or width == 0:   # width 0: the view is the base
        return False
    return (dims[k:] == [(p, None) for p in range(width, rank)]
            and sorted([p for p, _ in dims[:k]] + list(fixed)) == list(range(width)))


def base_tuples(base: torch.Tensor, indices: torch.Tensor, steps: List[Step]) -> torch.Tensor:
    """The base's int64 index tuples for ``indices`` on ``base`` seen through ``steps`` (a plan
    :func:`_plan` accepted).  Runs at trace time with torch ops, so dynamic sizes stay symbolic:
    a sliced dimension's coordinates are ``arange(n)`` sliced as the view was."""
    def sliced(p: int, coords: Any, kind: str, args: Tuple) -> torch.Tensor:
        if coords is None:
            coords = torch.arange(base.size(p), device=indices.device)
        if kind == "slice":
            return coords[args[1]:args[2]:args[3]]
        return coords.narrow(0, args[1], args[2])

    walked = _walk(base.dim(), steps, sliced,
                   lambda coords, i: i if coords is None else coords[i])
    assert walked is not None, steps            # _plan accepted the steps
    dims, fixed = walked
    idx = indices.to(torch.int64)
    k = idx.size(-1)
    view_of = {p: j for j, (p, _) in enumerate(dims[:k])}
    columns = []
    for p in range(k + len(fixed)):
        if p in fixed:
            value = fixed[p]
            columns.append(value.expand(idx.shape[:-1]) if isinstance(value, torch.Tensor)
                           else torch.full(idx.shape[:-1], value, dtype=torch.int64,
                                           device=idx.device))
        else:
            j = view_of[p]
            coords = dims[j][1]
            columns.append(idx[..., j] if coords is None else coords[idx[..., j]])
    return torch.stack(columns, dim=-1)


def _rewrite(gm: torch.fx.GraphModule, node: torch.fx.Node, schema: torch.FunctionSchema) -> bool:
    target: Any = node.args[0]
    indices = _arg(node, schema, "indices")
    if (_arg(node, schema, "input_dimension_count") is not None
            or _arg(node, schema, "feature_level") != "permissive"):
        # The DML form's padding and a feature level's rank limits are about the call as
        # written: the base's call could break a limit the view's keeps.
        return False
    if node.target is _ops.gather_nd.default and _arg(node, schema, "batch_dims") != 0:
        return False
    k = _tuple_size(indices)
    view_rank = _rank(target)
    if k is None or view_rank is None:
        return False
    chain: List[torch.fx.Node] = [target]      # the target back to the first tensor
    steps: List[Step] = []                     # steps[i] makes chain[i] out of chain[i + 1]
    while (found := _view_step(chain[-1])) is not None:
        chain.append(found[0])
        steps.append(found[1])
    # The furthest tensor up the chain through whose views the tuples still address whole rows.
    for i in range(len(steps), 0, -1):
        rank = _rank(chain[i])
        forward = steps[:i][::-1]
        if rank is not None and _plan(rank, forward, k):
            base, base_rank, steps = chain[i], rank, forward
            break
    else:
        return False
    with gm.graph.inserting_before(node):
        new_idx = gm.graph.call_function(base_tuples, (base, indices, steps))
    new_idx.meta["_tdo_tuple_size"] = base_rank - (view_rank - k)
    args = list(node.args)
    kwargs = dict(node.kwargs)
    args[0] = base
    names = [a.name for a in schema.arguments]
    pos = names.index("indices")
    if pos < len(args):
        args[pos] = new_idx
    else:
        kwargs["indices"] = new_idx
    node.args, node.kwargs = tuple(args), kwargs
    return True


_MERGE_KEYS = ("reduction", "input_dimension_count", "indices_dimension_count", "feature_level",
               "check_indices")


def _derived(base: torch.fx.Node) -> set:
    """Every node whose value is computed from ``base``'s values or aliases them: its views and
    everything that reads them (``base_tuples`` reads only sizes).  A node in this set between
    two writes into ``base`` sees the first write, so the two cannot become one call."""
    out: set = set()
    stack = [u for u in base.users if u.target is not base_tuples]
    while stack:
        n = stack.pop()
        if n in out:
            continue
        out.add(n)
        stack.extend(n.users)
    return out


def _fresh(node: Any) -> bool:
    """Whether ``node`` is a tensor of its own (an input, a buffer, an op's new result), not a
    view: no write into another tensor can then change it."""
    if not isinstance(node, torch.fx.Node):
        return False
    if node.op in ("placeholder", "get_attr"):
        return True
    schema = getattr(node.target, "_schema", None)     # an op overload's
    return (node.op == "call_function" and isinstance(schema, torch.FunctionSchema)
            and all(r.alias_info is None for r in schema.returns))


def _root(node: Any) -> Any:
    """The tensor of its own that ``node`` is a view of (``node`` itself when it is one)."""
    while isinstance(node, torch.fx.Node) and not _fresh(node) and node.all_input_nodes:
        node = node.args[0] if isinstance(node.args[0], torch.fx.Node) else node.all_input_nodes[0]
    return node


def _mutated_roots(node: torch.fx.Node) -> List[Any]:
    """The tensors (as :func:`_root`) that ``node`` writes into: its schema's written arguments."""
    schema = getattr(node.target, "_schema", None)
    if node.op != "call_function" or not isinstance(schema, torch.FunctionSchema):
        return []
    out = []
    for i, a in enumerate(schema.arguments):
        if a.alias_info is not None and a.alias_info.is_write:
            value = node.args[i] if i < len(node.args) else node.kwargs.get(a.name)
            if isinstance(value, torch.fx.Node):
                out.append(_root(value))
    return out


def _tuple_size(indices: Any) -> Optional[int]:
    """The static tuple size of int64-castable tuples (not uint64), else None."""
    if not isinstance(indices, torch.fx.Node):
        return None
    if "_tdo_tuple_size" in indices.meta:             # base_tuples: int64
        return indices.meta["_tdo_tuple_size"]
    val = indices.meta.get("val")
    if (not isinstance(val, torch.Tensor) or val.dim() == 0 or val.dtype == torch.uint64
            or not isinstance(val.shape[-1], int)):
        return None
    return val.shape[-1]


def merge_rows(indices: List[torch.Tensor], updates: List[torch.Tensor],
               rows: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """One call's int64 tuples and updates out of several calls' into the same base, in order."""
    k = indices[0].size(-1)
    idx = torch.cat([i.to(torch.int64).reshape(-1, k) for i in indices])
    upd = torch.cat([u.reshape((-1,) + tuple(u.shape[u.dim() - rows:])) for u in updates])
    return idx, upd


def _merge(gm: torch.fx.GraphModule) -> int:
    """Consecutive ``scatter_nd_`` calls into the same tensor, with the same options and nothing
    reading the tensor between them, become one call whose tuples are theirs in order: ScatterND
    applies tuples in index order, so each duplicate resolves as the sequence of calls resolves it
    (the later call wins, sums in call order), and onnxruntime copies the tensor once instead of
    once per call (its ScatterND writes a fresh output)."""
    schema = _ops.scatter_nd_.default._schema
    derived: Dict[torch.fx.Node, set] = {}

    def computed_from(x: Any, root: torch.fx.Node) -> bool:
        if root not in derived:
            derived[root] = _derived(root)
        return x is root or x in derived[root]

    def reads(n: torch.fx.Node) -> Tuple[Any, Any]:
        return _arg(n, schema, "indices"), _arg(n, schema, "updates")

    groups: List[List[torch.fx.Node]] = []
    open_group: Dict[torch.fx.Node, Tuple[List[Any], List[torch.fx.Node]]] = {}
    for node in gm.graph.nodes:
        write = node.op == "call_function" and node.target is _ops.scatter_nd_.default
        # A node that sees a pending write's target, or changes what a pending write reads:
        # the pending writes cannot move past it.
        roots = _mutated_roots(node)
        for b, (_, group) in list(open_group.items()):
            if (computed_from(node, b) and not (write and node.args[0] is b)) or any(
                    root is not b and computed_from(x, root)
                    for root in roots for n in group for x in reads(n)):
                del open_group[b]
        if not write:
            continue
        base = node.args[0]
        key = [_arg(node, schema, n) for n in _MERGE_KEYS] + [_tuple_size(reads(node)[0])]
        options = dict(zip(_MERGE_KEYS, key))
        if not (_fresh(base) and _rank(base) is not None and key[-1] is not None and key[-1] > 0
                and options["input_dimension_count"] is None
                and options["indices_dimension_count"] is None
                and options["feature_level"] == "permissive"):
            open_group.pop(base, None)
            continue
        pending = open_group.get(base)
        # Tuples or updates computed from the target before the group's first write read its
        # values from before every write of the group, merged or not (anything computed from it
        # between the writes closed the group above); a view of the target as updates, which a
        # merged call would read later, is refused by the op itself (MemoryOverlapError).
        if pending is not None and pending[0] == key:
            pending[1].append(node)
            continue
        groups.append([node])
        open_group[base] = (key, groups[-1])
    count = 0
    for group in (g for g in groups if len(g) > 1):
        last, base = group[-1], group[-1].args[0]
        rank, width = _rank(base), _tuple_size(reads(last)[0])
        assert rank is not None and width is not None      # checked when the group opened
        rows = rank - width
        with gm.graph.inserting_before(last):
            pair = gm.graph.call_function(merge_rows, (
                [reads(n)[0] for n in group], [reads(n)[1] for n in group], rows))
            idx = gm.graph.call_function(operator.getitem, (pair, 0))
            upd = gm.graph.call_function(operator.getitem, (pair, 1))
            kwargs = {n: _arg(last, schema, n) for n in _MERGE_KEYS}
            # deterministic: the merged call keeps the calls' order in eager too (ONNX's
            # ScatterND, in onnxruntime, applies tuples in index order either way).
            gm.graph.call_function(_ops.scatter_nd_.default, (base, idx, upd),
                                   dict(kwargs, deterministic=True))
        for node in group:
            gm.graph.erase_node(node)
        count += len(group) - 1
    return count


def writes_on_bases(program: "torch.export.ExportedProgram") -> int:
    """Rewrite, in place, each ``scatter_nd_`` and ``gather_nd`` into a view as the same call on
    the view's base, then merge consecutive writes into the same tensor (see the module's
    docstring); returns how many calls were rewritten or merged away."""
    gm = program.graph_module
    count = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is _ops.scatter_nd_.default or node.target is _ops.gather_nd.default:
            if _rewrite(gm, node, node.target._schema):
                count += 1
    if count:
        gm.graph.eliminate_dead_code()
    count += _merge(gm)
    if count:
        gm.graph.eliminate_dead_code()
        gm.recompile()
    return count
