"""Independent oracles and the worked examples of the spec pages.

Written from the spec text with plain Python loops over numpy arrays, sharing no code with the
package: data are compared as raw bits (every dtype is viewed as an unsigned integer of its width),
so the oracle needs no float16/bfloat16 support and a gather must be bit-exact.
"""
import numpy as np
import torch

_BITS = {1: (torch.uint8, np.uint8), 2: (torch.int16, np.uint16), 4: (torch.int32, np.uint32),
         8: (torch.int64, np.uint64)}
SIGNED = (torch.int64, torch.int32)


def to_bits(t: torch.Tensor) -> np.ndarray:
    """The tensor's raw bits as an unsigned numpy array of the same shape."""
    tv, nv = _BITS[t.element_size()]
    t = t.detach().cpu()
    if t.dtype == torch.bool:
        t = t.view(torch.uint8)
    return t.contiguous().view(tv).numpy().view(nv)


def index_values(indices: torch.Tensor) -> np.ndarray:
    """Index values as Python ints (object array): exact for uint64 above 2**63 too."""
    t = indices.detach().cpu()
    if t.dtype == torch.uint64:
        return np.vectorize(int, otypes=[object])(t.contiguous().view(torch.int64).numpy().view(np.uint64))
    if t.dtype == torch.uint32:
        return t.to(torch.int64).numpy().astype(object)
    return t.numpy().astype(object)


def _coords(idx, pos, k, sizes, signed):
    """The wrapped coordinates of tuple ``pos``, or None when one is out of range."""
    coords = []
    for j in range(k):
        v = int(idx[pos + (j,)])
        if signed and v < 0:
            v += sizes[j]
        if not 0 <= v < sizes[j]:
            return None
        coords.append(v)
    return coords


def gather_nd_ref(data: torch.Tensor, indices: torch.Tensor, batch_dims: int = 0,
                  skip_bad: bool = False) -> np.ndarray:
    """ONNX GatherND (natural form), element by element.  Returns raw bits.

    output[b..., i..., s...] = data[b..., wrap(indices[b..., i..., 0]), ..., wrap(...[k-1]), s...]
    where wrap adds the dimension size to a negative index of a signed index type.  An
    out-of-range tuple raises IndexError, or with ``skip_bad`` (``check_indices=False``) gives
    a zero slice.
    """
    d = to_bits(data)
    idx = index_values(indices)
    b = batch_dims
    k = idx.shape[-1]
    out_shape = idx.shape[:-1] + d.shape[b + k:]
    out = np.zeros(out_shape, dtype=d.dtype)
    signed = indices.dtype in SIGNED
    sizes = d.shape[b:b + k]
    for pos in np.ndindex(*idx.shape[:-1]):
        coords = _coords(idx, pos, k, sizes, signed)
        if coords is None:
            if skip_bad:
                continue            # out stays zero
            raise IndexError(f"reference: tuple {pos} out of range for sizes {sizes}")
        out[pos] = d[tuple(pos[:b]) + tuple(coords)]
    return out


# ---------------------------------------------------------------------------------------------
# Worked examples copied from shared/spec/DML_GATHER_ND.md (DML form, uint32 indices).
# ---------------------------------------------------------------------------------------------

GATHER_ND_EXAMPLES = [
    dict(
        name="example1_1d_remapping",
        input=[[0, 1], [2, 3]], input_sizes=(2, 2), input_dimension_count=2,
        indices=[[1], [0]], indices_sizes=(2, 1), indices_dimension_count=2,
        output=[[2, 3], [0, 1]], output_sizes=(2, 2),
    ),
    dict(
        name="example2_2d_remapping",
        input=[[[[0, 1], [2, 3]], [[4, 5], [6, 7]]]], input_sizes=(1, 2, 2, 2),
        input_dimension_count=3,
        indices=[[[[0, 1], [1, 0]]]], indices_sizes=(1, 1, 2, 2), indices_dimension_count=2,
        output=[[[[2, 3], [4, 5]]]], output_sizes=(1, 1, 2, 2),
    ),
]


def _np_value(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def scatter_nd_ref(data: torch.Tensor, indices: torch.Tensor, updates: torch.Tensor,
                   reduction: str = "none", skip_bad: bool = False) -> torch.Tensor:
    """ONNX ScatterND-18 (natural form), tuple by tuple in index order (so for "none" the last
    duplicate wins).  Arithmetic in numpy in the data's dtype; bfloat16 is rounded after every
    step, as torch's bfloat16 arithmetic does.  Returns a torch tensor of the data's dtype.  An
    out-of-range tuple raises IndexError, or with ``skip_bad`` (``check_indices=False``) is
    skipped."""
    out = _np_value(data).copy()
    upd = _np_value(updates)
    idx = index_values(indices)
    k = idx.shape[-1]
    signed = indices.dtype in SIGNED
    bf16 = data.dtype == torch.bfloat16
    with np.errstate(all="ignore"):          # integer wrap-around is the defined behaviour
        _scatter_loop(out, upd, idx, k, signed, bf16, reduction, skip_bad)
    res = torch.from_numpy(np.ascontiguousarray(out))
    return res.to(torch.bfloat16) if bf16 else res


def _scatter_loop(out, upd, idx, k, signed, bf16, reduction, skip_bad):
    for pos in np.ndindex(*idx.shape[:-1]):
        coords = _coords(idx, pos, k, out.shape[:k], signed)
        if coords is None:
            if skip_bad:
                continue
            raise IndexError(f"reference: tuple {pos} out of range for sizes {out.shape[:k]}")
        c = tuple(coords)
        u = upd[pos]
        cur = out[c]
        if reduction == "none":
            new = u
        elif reduction == "add":
            new = np.logical_or(cur, u) if out.dtype == np.bool_ else cur + u
        elif reduction == "mul":
            new = np.logical_and(cur, u) if out.dtype == np.bool_ else cur * u
        elif reduction == "max":
            new = np.maximum(cur, u)
        elif reduction == "min":
            new = np.minimum(cur, u)
        else:
            raise ValueError(reduction)
        if bf16:
            new = torch.from_numpy(np.asarray(new, dtype=np.float32)).to(torch.bfloat16).float().numpy()
        out[c] = new


# Copied from shared/spec/DML_SCATTER_ND.md (natural form, as the spec README's item 3 reads it).
SCATTER_ND_EXAMPLE = dict(
    input=[1, 2, 3, 4, 5, 6, 7, 8], indices=[[4], [3], [1], [7]], updates=[9, 10, 11, 12],
    output=[1, 11, 3, 10, 9, 6, 7, 12],
)


def _order_key(v, is_float):
    """DirectML/torch.sort order: NaN above everything, -0.0 equal to +0.0."""
    if is_float:
        v = float(v)
        return (1, 0.0) if v != v else (0, v + 0.0)
    return (0, int(v))


def top_k1_ref(x: torch.Tensor, k: int, axis: int, decreasing: bool = True):
    """Stable top-k by Python's stable sort, sequence by sequence.  Returns (value bits as an
    unsigned numpy array, indices as int64 numpy array), laid out like torch.topk's outputs."""
    is_float = x.dtype.is_floating_point
    vals = x.detach().cpu().movedim(axis, -1)
    bits = to_bits(vals)
    n = vals.shape[-1]
    out_bits = np.zeros(vals.shape[:-1] + (k,), dtype=bits.dtype)
    out_idx = np.zeros(vals.shape[:-1] + (k,), dtype=np.int64)
    if is_float:
        seqs = vals.to(torch.float64).reshape(-1, n).tolist()
    elif vals.dtype == torch.uint64:     # exact Python ints: 2**63 and above stay above
        seqs = bits.reshape(-1, n).astype(np.uint64).tolist()
    else:
        seqs = vals.to(torch.int64).reshape(-1, n).tolist()
    bits2 = bits.reshape(-1, n)
    for r, seq in enumerate(seqs):
        order = sorted(range(n), key=lambda i: _order_key(seq[i], is_float), reverse=decreasing)
        order = order[:k]
        pos = np.unravel_index(r, vals.shape[:-1]) if vals.dim() > 1 else ()
        out_idx[pos] = order
        out_bits[pos] = bits2[r, order]
    return np.moveaxis(out_bits, -1, axis), np.moveaxis(out_idx, -1, axis)


# Copied from shared/spec/DML_TOP_K1.md: (input, axis, k, direction, values, indices).
_TK_A = [[[[0, 1, 10, 11], [3, 2, 9, 8], [4, 5, 6, 7]]]]
_TK_B = [[[[1, 2, 2, 3], [3, 4, 5, 5], [6, 6, 6, 6]]]]
TOP_K1_EXAMPLES = [
    dict(name="example1", input=_TK_A, axis=3, k=2, direction="decreasing",
         values=[[[[11, 10], [9, 8], [7, 6]]]], indices=[[[[3, 2], [2, 3], [3, 2]]]]),
    dict(name="example2_axis2", input=_TK_A, axis=2, k=2, direction="decreasing",
         values=[[[[4, 5, 10, 11], [3, 2, 9, 8]]]], indices=[[[[2, 2, 0, 0], [1, 1, 1, 1]]]]),
    dict(name="example3_ties", input=_TK_B, axis=3, k=3, direction="decreasing",
         values=[[[[3, 2, 2], [5, 5, 4], [6, 6, 6]]]], indices=[[[[3, 1, 2], [2, 3, 1], [0, 1, 2]]]]),
    dict(name="example4_increasing", input=_TK_B, axis=3, k=3, direction="increasing",
         values=[[[[1, 2, 2], [3, 4, 5], [6, 6, 6]]]], indices=[[[[0, 1, 2], [0, 1, 2], [0, 1, 2]]]]),
]
