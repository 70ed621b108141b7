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


def gather_nd_ref(data: torch.Tensor, indices: torch.Tensor, batch_dims: int = 0) -> np.ndarray:
    """ONNX GatherND (natural form), element by element.  Returns raw bits.

    output[b..., i..., s...] = data[b..., wrap(indices[b..., i..., 0]), ..., wrap(...[k-1]), s...]
    where wrap adds the dimension size to a negative index of a signed index type.
    """
    d = to_bits(data)
    idx = index_values(indices)
    b = batch_dims
    k = idx.shape[-1]
    out_shape = idx.shape[:-1] + d.shape[b + k:]
    out = np.zeros(out_shape, dtype=d.dtype)
    signed = indices.dtype in SIGNED
    for pos in np.ndindex(*idx.shape[:-1]):
        coords = []
        for j in range(k):
            v = int(idx[pos + (j,)])
            size = d.shape[b + j]
            if signed and v < 0:
                v += size
            if not 0 <= v < size:
                raise IndexError(f"reference: index {idx[pos + (j,)]} out of range for size {size}")
            coords.append(v)
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
