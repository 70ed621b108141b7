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
from typing import Any, Dict, List, Optional, Sequence, Tuple

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
    if t in (_aten.permute.default,) and all(isinstance(v, int) for v in a[1]):
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


def _plan(rank: int, steps: Sequence[Step], k: int) -> Optional[List[Tuple[str, int]]]:
    """For a base of ``rank`` dimensions seen through ``steps``, and tuples of size ``k`` on the
    view: which base dimensions the base's tuples cover and where each coordinate comes from
    (``("view", j)``: the view tuple's coordinate j, ``("fixed", s)``: fixed by step s), or None
    when the view moves a row dimension (the rows would not be the base's rows)."""
    dims: List[int] = list(range(rank))          # the view's dims, as base dims
    fixed: Dict[int, int] = {}                   # base dim -> the step that fixes it
    for s, (kind, args) in enumerate(steps):
        n = len(dims)
        if kind == "select":
            d = args[0] + n if args[0] < 0 else args[0]
            if not 0 <= d < n:
                return None
            fixed[dims.pop(d)] = s
        elif kind in ("slice", "narrow"):
            d = args[0] + n if args[0] < 0 else args[0]
            if not 0 <= d < n:
                return None
        elif kind == "permute":
            perm = [p + n if p < 0 else p for p in args]
            if sorted(perm) != list(range(n)):
                return None
            dims = [dims[p] for p in perm]
        elif kind == "transpose":
            a, b = (p + n if p < 0 else p for p in args)
            if not (0 <= a < n and 0 <= b < n):
                return None
            dims[a], dims[b] = dims[b], dims[a]
    n = len(dims)
    if not 0 <= k <= n:
        return None
    width = k + len(fixed)
    if width == 0:          # no coordinate to add: the view is the base (an identity permute)
        return None
    # The rows: the view's dims from k on must be the base's dims from width on, untouched.
    if dims[k:] != list(range(width, rank)):
        return None
    if sorted(dims[:k] + list(fixed)) != list(range(width)):
        return None
    # A sliced row dimension would shorten the rows: refuse when a slice touched one.
    touched = _sliced_base_dims(rank, steps)
    if any(p >= width for p in touched):
        return None
    source: List[Tuple[str, int]] = []
    for p in range(width):
        source.append(("fixed", fixed[p]) if p in fixed else ("view", dims[:k].index(p)))
    return source


def _sliced_base_dims(rank: int, steps: Sequence[Step]) -> List[int]:
    dims, out = list(range(rank)), []
    for kind, args in steps:
        n = len(dims)
        if kind == "select":
            dims.pop(args[0] + n if args[0] < 0 else args[0])
        elif kind in ("slice", "narrow"):
            out.append(dims[args[0] + n if args[0] < 0 else args[0]])
        elif kind == "permute":
            dims = [dims[p + n if p < 0 else p] for p in args]
        elif kind == "transpose":
            a, b = (p + n if p < 0 else p for p in args)
            dims[a], dims[b] = dims[b], dims[a]
    return out


def base_tuples(base: torch.Tensor, indices: torch.Tensor, steps: List[Step]) -> torch.Tensor:
    """The base's int64 index tuples for ``indices`` on ``base`` seen through ``steps`` (a plan
    :func:`_plan` accepted).  Runs at trace time with torch ops, so dynamic sizes stay symbolic."""
    dims: List[Tuple[int, Optional[torch.Tensor]]] = [(p, None) for p in range(base.dim())]
    fixed: Dict[int, Any] = {}
    for kind, args in steps:
        n = len(dims)
        if kind == "select":
            d = args[0] + n if args[0] < 0 else args[0]
            p, coords = dims.pop(d)
            fixed[p] = args[1] if coords is None else coords[args[1]]
        elif kind in ("slice", "narrow"):
            d = args[0] + n if args[0] < 0 else args[0]
            p, coords = dims[d]
            if coords is None:
                coords = torch.arange(base.size(p), device=indices.device)
            if kind == "slice":
                _, start, end, step = args
                coords = coords[start:end:step]
            else:
                coords = coords.narrow(0, args[1], args[2])
            dims[d] = (p, coords)
        elif kind == "permute":
            dims = [dims[p + n if p < 0 else p] for p in args]
        elif kind == "transpose":
            a, b = (p + n if p < 0 else p for p in args)
            dims[a], dims[b] = dims[b], dims[a]
    k = indices.size(-1)
    idx = indices.to(torch.int64)
    width = k + len(fixed)
    columns = []
    for p in range(width):
        if p in fixed:
            value = fixed[p]
            if isinstance(value, torch.Tensor):
                columns.append(value.expand(idx.shape[:-1]))
            else:
                columns.append(torch.full(idx.shape[:-1], value, dtype=torch.int64,
                                          device=idx.device))
        else:
            j = next(j for j in range(k) if dims[j][0] == p)
            coords = dims[j][1]
            column = idx[..., j]
            columns.append(column if coords is None else coords[column])
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
    ival = indices.meta.get("val") if isinstance(indices, torch.fx.Node) else None
    if not isinstance(ival, torch.Tensor) or ival.dim() == 0 or ival.dtype == torch.uint64:
        return False
    k = ival.shape[-1]
    view_rank = _rank(target) if isinstance(target, torch.fx.Node) else None
    if not isinstance(k, int) or view_rank is None:
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
        if rank is not None and _plan(rank, forward, k) is not None:
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


def _depends_on(node: Any, base: torch.fx.Node) -> bool:
    """Whether ``node``'s value is computed from ``base``'s values (at any distance)."""
    stack, seen = [node], set()
    while stack:
        n = stack.pop()
        if not isinstance(n, torch.fx.Node) or n in seen:
            continue
        seen.add(n)
        if n is base:
            return True
        if n.target is base_tuples:
            stack.extend(a for a in n.all_input_nodes if a is not base)
        else:
            stack.extend(n.all_input_nodes)
    return False


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
    groups: List[List[torch.fx.Node]] = []
    open_group: Dict[torch.fx.Node, List[torch.fx.Node]] = {}
    derived: Dict[torch.fx.Node, set] = {}
    for node in gm.graph.nodes:
        write = node.op == "call_function" and node.target is _ops.scatter_nd_.default
        for b in [b for b in open_group if node in derived[b]]:
            if not (write and node.args[0] is b):
                del open_group[b]
        # A write into a tensor that a pending write's tuples or updates are read from: the
        # pending write cannot move past it.
        for root in _mutated_roots(node):
            if root not in derived:
                derived[root] = _derived(root)
            for b in [b for b, g in open_group.items() if b is not root and any(
                    x is root or x in derived[root] for n in g
                    for x in (_arg(n, schema, "indices"), _arg(n, schema, "updates")))]:
                del open_group[b]
        if write:
            base = node.args[0]
            group = open_group.get(base)
            indices, updates = _arg(node, schema, "indices"), _arg(node, schema, "updates")
            key = [_arg(node, schema, n) for n in _MERGE_KEYS] + [_tuple_size(indices)]
            mergeable = (_fresh(base) and key[1] is None and key[2] is None
                         and key[3] == "permissive" and key[-1] is not None and key[-1] > 0)
            if (group is not None and mergeable and group[0].meta["_tdo_key"] == key
                    and not _depends_on(indices, base) and not _depends_on(updates, base)):
                group.append(node)
                continue
            if group is not None:
                del open_group[base]
            if mergeable:
                node.meta["_tdo_key"] = key
                group = [node]
                groups.append(group)
                open_group[base] = group
                if base not in derived:
                    derived[base] = _derived(base)
    count = 0
    for group in groups:
        for node in group:
            node.meta.pop("_tdo_key", None)
        if len(group) < 2:
            continue
        last, base = group[-1], group[-1].args[0]
        rank, width = _rank(base), _tuple_size(_arg(last, schema, "indices"))
        if rank is None or width is None:           # not mergeable: _fresh and the key hold
            continue
        rows = rank - width
        with gm.graph.inserting_before(last):
            pair = gm.graph.call_function(merge_rows, (
                [_arg(n, schema, "indices") for n in group],
                [_arg(n, schema, "updates") for n in group], rows))
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
