"""Input generators shared by the test modules."""
import torch

DATA_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
               torch.int16, torch.int8, torch.uint8, torch.uint16, torch.uint32, torch.bool]
INDEX_DTYPES = [torch.int64, torch.int32, torch.uint32, torch.uint64]
DML_DATA_DTYPES = [torch.float32, torch.float16, torch.int32, torch.int16, torch.int8, torch.uint32,
                   torch.uint16, torch.uint8]


def make_data(shape, dtype, generator=None):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=generator).bool()
    if dtype.is_floating_point:
        return torch.randn(shape, generator=generator, dtype=torch.float64).mul(100).to(dtype)
    lo, hi = {torch.uint8: (0, 256), torch.int8: (-128, 128), torch.int16: (-2**15, 2**15),
              torch.uint16: (0, 2**16), torch.int32: (-2**31, 2**31),
              torch.uint32: (0, 2**32), torch.int64: (-2**62, 2**62)}[dtype]
    return torch.randint(lo, hi, shape, generator=generator, dtype=torch.int64).to(dtype)


def make_indices(index_shape_prefix, sizes, dtype, negative=False, generator=None):
    """Random in-range tuples ``index_shape_prefix + [len(sizes)]``; some negative when asked."""
    cols = []
    for s in sizes:
        c = torch.randint(0, max(s, 1), tuple(index_shape_prefix), generator=generator)
        if negative and dtype in (torch.int64, torch.int32):
            flip = torch.randint(0, 2, c.shape, generator=generator).bool()
            c = torch.where(flip, c - s, c)
        cols.append(c)
    return torch.stack(cols, dim=-1).to(dtype) if cols else torch.empty(
        tuple(index_shape_prefix) + (0,), dtype=dtype)


#: The C++ apply pass splits the destination rows among threads only for a destination of
#: this many bytes or more, or for rows of SPLIT_ROW_BYTES or more (scatter_nd.cpp, split_pays):
#: the tests of the split use such destinations.
SPLIT_DEST_BYTES, SPLIT_ROW_BYTES = 16 << 20, 1024


def split_rows(row_bytes, at_least=1):
    """A row count of at least ``at_least`` whose destination the C++ kernel splits."""
    return max(at_least, -(-SPLIT_DEST_BYTES // row_bytes))
