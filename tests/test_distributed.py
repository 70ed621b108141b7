"""DTensor: sharding rules and the exact distributed top_k1, on 2 and 3 gloo CPU ranks.

One spawn per world size runs every case inside the workers, against the single-process op on
the full tensor, bit for bit; the module-scoped fixture collects the per-case results and one
test per world size reports the failures.  DTensors are built with ``DTensor.from_local`` from
each rank's chunk (no collective: gloo refuses some dtypes, e.g. uint32, in DTensor's own
scatter)."""
import os
import traceback

import pytest
import torch
import torch.distributed as dist

pytestmark = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="needs torch.distributed with gloo")


def same(a, b):
    """Bit for bit: NaN where NaN, equal values elsewhere, -0.0 where -0.0."""
    if a.dtype.is_floating_point:
        return (torch.equal(a.isnan(), b.isnan()) and torch.equal(a.nan_to_num(0), b.nan_to_num(0))
                and torch.equal(a.signbit() & ~a.isnan(), b.signbit() & ~b.isnan()))
    return torch.equal(a, b)


def _cases(world, rank):
    from torch.distributed.tensor import DTensor, Replicate, Shard, init_device_mesh
    from torch.distributed.tensor.debug import CommDebugMode

    import torch_dml_ops as tdo
    from torch_dml_ops import _compat
    from torch_dml_ops.distributed._placements import _chunk_bounds
    mesh = init_device_mesh("cpu", (world,))

    def shard(x, dim):
        a, b = _chunk_bounds(x.shape[dim], world, rank)
        return DTensor.from_local(x.narrow(dim, a, b - a), mesh, [Shard(dim)], run_check=False,
                                  shape=x.shape, stride=x.stride())

    def rep(x):
        return DTensor.from_local(x, mesh, [Replicate()], run_check=False)

    results = []
    pool = torch.tensor([0., -0., 1., float("nan"), float("inf"), -1.])
    for dtype in [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64,
                  torch.int32, torch.uint32, torch.uint16, torch.uint8, torch.bool]:
        for n in (1, 5, 7, 11):
            g = torch.Generator().manual_seed(n)
            x = pool[torch.randint(0, 6, (3, n), generator=g)]
            if dtype == torch.bool:
                x = x > 0
            elif not dtype.is_floating_point:
                x = x.nan_to_num(0, 5, 1).abs().to(dtype)
            else:
                x = x.to(dtype)
            for direction in ("decreasing", "increasing"):
                for idt in (torch.int64, torch.int32, torch.uint32):
                    for k in sorted({1, min(3, n), n}):
                        name = f"top_k1 sharded axis {dtype} n={n} {direction} {idt} k={k}"
                        try:
                            with CommDebugMode() as comm:
                                v, i = tdo.top_k1(shard(x, 1), k, direction=direction,
                                                  index_dtype=idt)
                            ev, ei = tdo.top_k1(x, k, direction=direction, index_dtype=idt)
                            ok = (same(v.to_local(), ev) and torch.equal(i.to_local(), ei)
                                  and comm.get_total_counts() == 1
                                  and all(isinstance(p, Replicate) for p in v.placements))
                            results.append((name, ok, "" if ok else f"{v.to_local()} {ev}"))
                        except Exception:
                            results.append((name, False, traceback.format_exc()))
    # gradient through the distributed top-k
    x = torch.randn(4, 9, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    dx = shard(x, 1).detach().requires_grad_()
    v, _ = tdo.top_k1(dx, 4)
    (v.to_local() * torch.arange(1., 5, dtype=torch.float64)).sum().backward()
    xr = x.clone().requires_grad_()
    (tdo.top_k1(xr, 4)[0] * torch.arange(1., 5, dtype=torch.float64)).sum().backward()
    a, b = _chunk_bounds(9, world, rank)
    if _compat.DTENSOR_GRAD_KEEPS_SHARDS:
        ok = dx.grad.placements == (Shard(1),) and torch.equal(dx.grad.to_local(), xr.grad[:, a:b])
    else:       # torch 2.10 replicates the gradient (_compat): the same values
        ok = torch.equal(dx.grad.full_tensor(), xr.grad)
    results.append(("top_k1 gradient", ok, f"{dx.grad.placements}"))
    # the public function on public APIs (what tdo.top_k1 calls for a DTensor sharded on axis)
    try:
        import torch_dml_ops.distributed as tdo_dist
        x = torch.randn(3, 10, generator=torch.Generator().manual_seed(13))
        v, i = tdo_dist.top_k1(shard(x, 1), 4, axis=1, direction="increasing",
                               index_dtype=torch.int32)
        ev, ei = tdo.top_k1(x, 4, 1, "increasing", torch.int32)
        ok = torch.equal(v.to_local(), ev) and torch.equal(i.to_local(), ei)
        v, i = tdo_dist.top_k1(shard(x, 0), 4)          # not on axis: the sharding rule
        a, b = _chunk_bounds(3, world, rank)
        ok = ok and v.placements == (Shard(0),) and torch.equal(v.to_local(), tdo.top_k1(x, 4)[0][a:b])
        try:
            tdo_dist.top_k1(x, 4)
            ok = False
        except TypeError as e:
            ok = ok and "input must be a DTensor" in str(e)
        results.append(("torch_dml_ops.distributed.top_k1", ok, ""))
    except Exception:
        results.append(("torch_dml_ops.distributed.top_k1", False, traceback.format_exc()))
    try:                                     # gradient with a non-axis dim sharded
        x = torch.randn(6, 9, generator=torch.Generator().manual_seed(14), dtype=torch.float64)
        dx = shard(x, 0).detach().requires_grad_()
        v, _ = tdo.top_k1(dx, 4)
        w = torch.arange(24, dtype=torch.float64).reshape(6, 4)
        (v.full_tensor() * w).sum().backward()
        xr = x.clone().requires_grad_()
        (tdo.top_k1(xr, 4)[0] * w).sum().backward()
        # torch 2.10 replicates the gradient (_compat): the same values.
        want_placements = (Shard(0),) if _compat.DTENSOR_GRAD_KEEPS_SHARDS else (Replicate(),)
        ok = dx.grad.placements == want_placements and torch.equal(dx.grad.full_tensor(), xr.grad)
        results.append(("top_k1 gradient, other dim sharded", ok, f"{dx.grad.placements}"))
    except Exception:
        results.append(("top_k1 gradient, other dim sharded", False, traceback.format_exc()))
    # gradients through gather_nd / scatter_nd on sharded inputs (the backward replicates)
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    i = torch.tensor([[1], [6], [-1], [1]])
    w = torch.arange(20., dtype=torch.float64).reshape(4, 5)
    for name, make, fn in [
        ("gather_nd gradient, trailing dim sharded", lambda t: shard(t, 1),
         lambda t: tdo.gather_nd(t, rep(i) if isinstance(t, DTensor) else i)),
        ("scatter_nd gradient, trailing dim sharded", lambda t: shard(t, 1),
         lambda t: tdo.scatter_nd(t, rep(i) if isinstance(t, DTensor) else i,
                                  (shard(w[:4], 1) if isinstance(t, DTensor) else w[:4]),
                                  reduction="add")),
    ]:
        try:
            dxx = make(x).detach().requires_grad_()
            out = fn(dxx)
            (out.full_tensor() * torch.arange(out.numel(), dtype=torch.float64)
             .reshape(out.shape)).sum().backward()
            xr = x.clone().requires_grad_()
            r = fn(xr)
            (r * torch.arange(r.numel(), dtype=torch.float64).reshape(r.shape)).sum().backward()
            a, b = _chunk_bounds(5, world, rank)
            ok = torch.equal(dxx.grad.full_tensor(), xr.grad)
            results.append((name, ok, "" if ok else f"{dxx.grad.full_tensor()} {xr.grad}"))
        except Exception:
            results.append((name, False, traceback.format_exc()))
    # scatter gradients w.r.t. input and updates, both sharded on their trailing dim (indices
    # replicated, duplicate tuples): the backward's own tensors (the "none" winners' positions)
    # must be DTensors too; it stays sharded, with no collective
    u = torch.randn(4, 5, generator=torch.Generator().manual_seed(15), dtype=torch.float64)
    for reduction in ("none", "add", "mul", "max", "min"):
        name = f"scatter_nd gradient of input and updates, trailing dim sharded, {reduction}"
        try:
            xs, us = (shard(t, 1).detach().requires_grad_() for t in (x, u))
            out = tdo.scatter_nd(xs, rep(i), us, reduction)
            gw = torch.arange(35., dtype=torch.float64).reshape(7, 5)
            with CommDebugMode() as comm:
                out.backward(shard(gw, 1))
            xr, ur = x.clone().requires_grad_(), u.clone().requires_grad_()
            tdo.scatter_nd(xr, i, ur, reduction).backward(gw)
            ok = (torch.equal(xs.grad.full_tensor(), xr.grad)
                  and torch.equal(us.grad.full_tensor(), ur.grad))
            if _compat.DTENSOR_GRAD_KEEPS_SHARDS:   # torch 2.10 may replicate: the same values
                ok = (ok and comm.get_total_counts() == 0
                      and xs.grad.placements == us.grad.placements == (Shard(1),))
            results.append((name, ok, "" if ok else f"{xs.grad} {us.grad} {comm.get_total_counts()}"))
        except Exception:
            results.append((name, False, traceback.format_exc()))
    # the backward of a sharded gather stays sharded (no collective): gather_nd_backward takes
    # only the indexed dims' sizes, so the local call derives its local input shape from grad
    from torch.distributed.tensor import Partial
    x3 = torch.randint(-5, 6, (4, 7, 6), generator=torch.Generator().manual_seed(11)).double()
    i3 = torch.tensor([[[1], [6], [1]], [[-1], [1], [2]], [[0], [0], [0]], [[3], [-7], [5]]])
    i2 = torch.tensor([[1, 2], [3, 6], [-1, 5], [1, 2], [0, -7]])       # k=2; duplicates in both
    # (every sharded dim has at least 3 entries: DTensor does not shard a dim over more ranks)
    for name, x_place, i_place, b, ii, grad_place in [
        ("batch dim", 0, 0, 1, i3, Shard(0)),              # i3: batch_dims=1
        ("trailing dim", 2, None, 1, i3, Shard(2)),
        ("tuple dim", None, 1, 1, i3, Partial()), ("tuple dim, k=2", None, 0, 0, i2, Partial()),
        ("trailing dim, k=2", 2, None, 0, i2, Shard(2)),
    ]:
        name = f"gather_nd backward sharded on the {name}"
        try:
            want_out = tdo.gather_nd(x3, ii, b)
            gw = torch.randint(-5, 6, want_out.shape,
                               generator=torch.Generator().manual_seed(12)).double()
            xr = x3.clone().requires_grad_()
            tdo.gather_nd(xr, ii, b).backward(gw)
            dx = (shard(x3, x_place) if x_place is not None else rep(x3)).detach()
            dx.requires_grad_()
            out = tdo.gather_nd(dx, shard(ii, i_place) if i_place is not None else rep(ii), b)
            (d,) = [p.dim for p in out.placements]
            with CommDebugMode() as comm:
                out.backward(shard(gw, d))
            ok = (comm.get_total_counts() == 0 and dx.grad.placements == (grad_place,)
                  and torch.equal(dx.grad.full_tensor(), xr.grad))
            results.append((name, ok, "" if ok else f"{dx.grad.placements} {comm.get_total_counts()}"))
        except Exception:
            results.append((name, False, traceback.format_exc()))
    # a vocab-parallel LM head (ColwiseParallel, logits sharded on the vocabulary) + sampling
    try:
        from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
        g = torch.Generator().manual_seed(4)
        head = torch.nn.Linear(16, 101)        # 101: uneven over 2 and 3 ranks
        with torch.no_grad():                  # small integers: every logit is exact
            head.weight.copy_(torch.randint(-2, 3, head.weight.shape, generator=g))
            head.bias.copy_(torch.randint(-2, 3, head.bias.shape, generator=g))
        hidden = torch.randint(-2, 3, (4, 16), generator=g).float()
        want_v, want_i = tdo.top_k1(head(hidden), 8)
        parallel = parallelize_module(head, mesh, ColwiseParallel(output_layouts=Shard(-1),
                                                                  use_local_output=False))
        logits = parallel(hidden)
        with CommDebugMode() as comm:
            v, i = tdo.top_k1(logits, 8)
        pick = torch.multinomial(torch.softmax(v.to_local(), -1), 1,
                                 generator=torch.Generator().manual_seed(5))
        want_pick = torch.multinomial(torch.softmax(want_v, -1), 1,
                                      generator=torch.Generator().manual_seed(5))
        ok = (logits.placements == (Shard(1),) and comm.get_total_counts() == 1
              and torch.equal(v.to_local(), want_v) and torch.equal(i.to_local(), want_i)
              and torch.equal(i.to_local().gather(-1, pick), want_i.gather(-1, want_pick)))
        results.append(("ColwiseParallel LM head + top_k1 sampling", ok,
                        "" if ok else f"{logits.placements} {v.to_local()} {want_v}"))
    except Exception:
        results.append(("ColwiseParallel LM head + top_k1 sampling", False, traceback.format_exc()))
    # scatter with the indexed dim sharded (indices, updates replicated): re-offset per rank
    base = torch.randn(11, 3, 2, generator=torch.Generator().manual_seed(6), dtype=torch.float64)
    idx = torch.tensor([[3, 1], [-1, 0], [3, 1], [0, 2], [10, -1], [5, 1], [3, 1], [-11, 0]])
    upd = torch.randn(8, 2, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    for dim in (0, 1):
        for reduction in ("none", "add", "mul", "max", "min"):
            for idt in (torch.int64, torch.int32):
                name = f"scatter_nd sharded indexed dim {dim} {reduction} {idt}"
                try:
                    ii = idx.to(idt)
                    want = tdo.scatter_nd(base, ii, upd, reduction)
                    with CommDebugMode() as comm:
                        got = tdo.scatter_nd(shard(base, dim), rep(ii), rep(upd), reduction)
                        inplace = shard(base.clone(), dim)
                        same_obj = tdo.scatter_nd_(inplace, ii, upd, reduction) is inplace
                    a, b = _chunk_bounds(base.shape[dim], world, rank)
                    ok = (comm.get_total_counts() == 0 and same_obj
                          and got.placements == (Shard(dim),)
                          and torch.equal(got.to_local(), want.narrow(dim, a, b - a))
                          and torch.equal(inplace.to_local(), want.narrow(dim, a, b - a)))
                    results.append((name, ok, "" if ok else f"{got.to_local()}"))
                except Exception:
                    results.append((name, False, traceback.format_exc()))
    try:            # element scatters with duplicates under deterministic mode: the last wins
        eidx = torch.tensor([[3, 1, 0], [3, 1, 0], [-8, 2, 1], [3, -2, 0], [10, 0, 1],
                             [3, 1, -2], [10, 0, 1], [-1, 0, 1]])
        eupd = torch.arange(1., 9, dtype=torch.float64)
        torch.use_deterministic_algorithms(True)
        try:
            want = tdo.scatter_nd(base, eidx, eupd)
            got = tdo.scatter_nd(shard(base, 0), rep(eidx), rep(eupd))
            inplace = shard(base.clone(), 0)
            tdo.scatter_nd_(inplace, eidx, eupd)
        finally:
            torch.use_deterministic_algorithms(False)
        a, b = _chunk_bounds(11, world, rank)
        ok = (want[3, 1, 0] == 6 and want[10, 0, 1] == 8 and torch.equal(got.to_local(), want[a:b])
              and torch.equal(inplace.to_local(), want[a:b]))
        results.append(("scatter_nd sharded index, deterministic duplicates", ok, f"{got.to_local()}"))
    except Exception:
        results.append(("scatter_nd sharded index, deterministic duplicates", False,
                        traceback.format_exc()))
    try:                                   # an out-of-range index raises on every rank
        tdo.scatter_nd(shard(base, 0), rep(torch.tensor([[11, 0]])), rep(upd[:1]))
        results.append(("scatter_nd sharded index out of range", False, "no IndexError"))
    except IndexError:
        results.append(("scatter_nd sharded index out of range", True, ""))
    try:                                   # check_indices=False: skipped, as on one device
        bidx = torch.tensor([[11, 0], [3, 1], [-12, 0], [2**40, 0], [-1, 5], [-1, 1]])
        for reduction in ("none", "add"):
            want = tdo.scatter_nd(base, bidx, upd[:6], reduction, check_indices=False)
            got = tdo.scatter_nd(shard(base, 0), rep(bidx), rep(upd[:6]), reduction,
                                 check_indices=False)
            a, b = _chunk_bounds(11, world, rank)
            ok = (torch.equal(want, tdo.scatter_nd(base, bidx[[1, 5]], upd[[1, 5]], reduction))
                  and torch.equal(got.to_local(), want[a:b]))
            results.append((f"scatter_nd sharded index unchecked {reduction}", ok,
                            f"{got.to_local()}"))
    except Exception:
        results.append(("scatter_nd sharded index unchecked", False, traceback.format_exc()))
    try:                                   # gradients: input sharded, updates replicated
        xs = shard(base, 0).detach().requires_grad_()
        us = rep(upd).detach().requires_grad_()
        out = tdo.scatter_nd(xs, rep(idx), us, "add")
        (out.full_tensor() * torch.arange(66, dtype=torch.float64).reshape(11, 3, 2)).sum().backward()
        xr, ur = base.clone().requires_grad_(), upd.clone().requires_grad_()
        (tdo.scatter_nd(xr, idx, ur, "add") *
         torch.arange(66, dtype=torch.float64).reshape(11, 3, 2)).sum().backward()
        ok = (torch.equal(xs.grad.full_tensor(), xr.grad)
              and torch.equal(us.grad.full_tensor(), ur.grad))
        results.append(("scatter_nd sharded index gradient", ok,
                        "" if ok else f"{us.grad} {ur.grad}"))
    except Exception:
        results.append(("scatter_nd sharded index gradient", False, traceback.format_exc()))
    try:                                   # in place under autograd (a non-leaf target)
        xs = shard(base, 0).detach().requires_grad_()
        us = rep(upd).detach().requires_grad_()
        y = xs * 2
        same_obj = tdo.scatter_nd_(y, rep(idx), us, "mul") is y
        (y.full_tensor() * torch.arange(66, dtype=torch.float64).reshape(11, 3, 2)).sum().backward()
        xr, ur = base.clone().requires_grad_(), upd.clone().requires_grad_()
        yr = xr * 2
        tdo.scatter_nd_(yr, idx, ur, "mul")
        (yr * torch.arange(66, dtype=torch.float64).reshape(11, 3, 2)).sum().backward()
        ok = (same_obj and torch.equal(xs.grad.full_tensor(), xr.grad)
              and torch.equal(us.grad.full_tensor(), ur.grad))
        results.append(("scatter_nd_ sharded index under autograd", ok, f"{xs.grad}"))
        try:
            tdo.scatter_nd_(shard(base, 0).detach().requires_grad_(), rep(idx), rep(upd))
            results.append(("scatter_nd_ sharded index, leaf refused", False, "no error"))
        except RuntimeError as e:
            results.append(("scatter_nd_ sharded index, leaf refused",
                            "leaf Variable that requires grad" in str(e), str(e)))
    except Exception:
        results.append(("scatter_nd_ sharded index under autograd", False, traceback.format_exc()))
    # out= and in place on a trailing dim: no collective, the target keeps its placement
    x = torch.randn(6, 4, generator=torch.Generator().manual_seed(8))
    i = torch.tensor([[1], [4], [1]])
    u = torch.randn(3, 4, generator=torch.Generator().manual_seed(9))
    for name, make, want in [
        ("scatter_nd_ trailing dim", lambda: (lambda d: (tdo.scatter_nd_(d, rep(i), shard(u, 1)),
                                                          d)[1])(shard(x.clone(), 1)),
         tdo.scatter_nd(x, i, u)),
        ("gather_nd out= trailing dim", lambda: (lambda o: (tdo.gather_nd(
            shard(x, 1), rep(i), out=o), o)[1])(shard(torch.empty(3, 4), 1)), tdo.gather_nd(x, i)),
        ("scatter_nd out= trailing dim", lambda: (lambda o: (tdo.scatter_nd(
            shard(x, 1), rep(i), shard(u, 1), reduction="max", out=o), o)[1])(
                shard(torch.empty(6, 4), 1)), tdo.scatter_nd(x, i, u, reduction="max")),
    ]:
        try:
            with CommDebugMode() as comm:
                got = make()
            a, b = _chunk_bounds(4, world, rank)
            ok = (comm.get_total_counts() == 0 and got.placements == (Shard(1),)
                  and torch.equal(got.to_local(), want[:, a:b]))
            results.append((name, ok, "" if ok else f"{got.placements} {got.to_local()}"))
        except Exception:
            results.append((name, False, traceback.format_exc()))
    # out= of any placement (the result moves to out's placements); a failing call writes
    # nothing (through torch.ops too, below)
    for name, call, want, out_shape in [
        ("gather_nd", lambda o, i=i: tdo.gather_nd(shard(x, 1), rep(i), out=o),
         tdo.gather_nd(x, i), (3, 4)),
        ("scatter_nd", lambda o, i=i: tdo.scatter_nd(shard(x, 1), rep(i), shard(u, 1), out=o),
         tdo.scatter_nd(x, i, u), (6, 4)),
    ]:
        for placement in (Replicate(), Shard(0), Shard(1)):
            try:
                o = (rep(torch.zeros(out_shape)) if placement == Replicate()
                     else shard(torch.zeros(out_shape), placement.dim))
                call(o)
                d = placement.dim if isinstance(placement, Shard) else 0
                a, b = _chunk_bounds(out_shape[d], world, rank) if placement != Replicate() \
                    else (0, out_shape[0])
                ok = o.placements == (placement,) and torch.equal(o.to_local(),
                                                                    want.narrow(d, a, b - a))
                results.append((f"{name} out= {placement}", ok, f"{o.to_local()}"))
            except Exception:
                results.append((f"{name} out= {placement}", False, traceback.format_exc()))
        o = shard(torch.full(out_shape, 7.), 0)
        try:
            call(o, i=torch.tensor([[1], [6], [1]]))
            results.append((f"{name} out= failing call", False, "no error"))
        except IndexError:
            results.append((f"{name} out= failing call", bool((o.to_local() == 7).all()), ""))
    try:                                   # out= refuses autograd, as torch's out= functions
        o = rep(torch.full((3, 4), 7.))
        tdo.gather_nd(shard(x, 1).detach().requires_grad_(), rep(i), out=o)
        results.append(("gather_nd out= refuses autograd", False, "no error"))
    except RuntimeError as e:
        results.append(("gather_nd out= refuses autograd",
                        "don't support automatic differentiation" in str(e)
                        and bool((o.to_local() == 7).all()), str(e)))
    try:    # torch.ops: the out= overloads as the public functions: any out placement, and
        #         None returned (the schema's "-> ()"; torch 2.14's DTensor would return out)
        ok = True
        for o in (rep(torch.zeros(3, 4)), shard(torch.full((3, 4), 7.), 0)):
            ret = torch.ops.torch_dml_ops.gather_nd_out(shard(x, 1), rep(i), out=o)
            ok = ok and ret is None and torch.equal(o.full_tensor(), tdo.gather_nd(x, i))
        o = shard(torch.full((3, 4), 7.), 0)
        try:
            torch.ops.torch_dml_ops.gather_nd_out(shard(x, 1), rep(torch.tensor([[9], [0], [1]])),
                                                  out=o)
            ok, detail = False, "no error"
        except IndexError as e:
            ok, detail = ok and bool((o.to_local() == 7).all()), str(e)
        target = shard(torch.zeros_like(x), 1)
        ret = torch.ops.torch_dml_ops.scatter_nd_out(rep(x), rep(i), rep(u), out=target)
        ok = ok and ret is None and target.placements == (Shard(1),) and torch.equal(
            target.full_tensor(), tdo.scatter_nd(x, i, u))
        results.append(("torch.ops out= overloads: any out placement, None returned", ok, detail))
    except Exception:
        results.append(("torch.ops out= overloads: any out placement, None returned", False,
                        traceback.format_exc()))
    try:    # through torch.ops (not routed): a target that would change placement is refused
        target = shard(x.clone(), 0)
        torch.ops.torch_dml_ops.scatter_nd_(target, rep(i), rep(u))
        results.append(("scatter_nd_ refuses a placement change", False, "no error"))
    except RuntimeError as e:
        ok = _compat.inplace_placement_refused(e) and torch.equal(target.to_local(), x.narrow(
            0, *(lambda a, b: (a, b - a))(*_chunk_bounds(6, world, rank))))
        results.append(("scatter_nd_ refuses a placement change", ok, str(e)))
    try:    # the public function: the same refusal, naming the functional op
        target = shard(x.clone(), 0)
        tdo.scatter_nd_(target, shard(i, 0), rep(u))      # sharded tuples: no local path
        results.append(("public scatter_nd_ refuses a placement change", False, "no error"))
    except RuntimeError as e:
        a, b = _chunk_bounds(6, world, rank)
        ok = ("use the functional torch_dml_ops.scatter_nd" in str(e)
              and str(e).startswith("scatter_nd_: the target DTensor has placements (Shard(dim=0),)")
              and torch.equal(target.to_local(), x[a:b]))
        results.append(("public scatter_nd_ refuses a placement change", ok, str(e)))
    # collective-free placements
    x = torch.randn(7, 5, generator=torch.Generator().manual_seed(1))
    i = torch.tensor([[1], [6], [-1]])
    u = torch.randn(3, 5, generator=torch.Generator().manual_seed(2))
    for name, fn, want, out_dim in [
        ("gather trailing dim", lambda: tdo.gather_nd(shard(x, 1), rep(i)), tdo.gather_nd(x, i), 1),
        ("gather tuple dim", lambda: tdo.gather_nd(rep(x), shard(i, 0)), tdo.gather_nd(x, i), 0),
        ("scatter trailing dim", lambda: tdo.scatter_nd(shard(x, 1), rep(i), shard(u, 1),
                                                        reduction="add"),
         tdo.scatter_nd(x, i, u, reduction="add"), 1),
        ("top_k1 other dim", lambda: tdo.top_k1(shard(x, 0), 2)[1], tdo.top_k1(x, 2)[1], 0),
    ]:
        try:
            with CommDebugMode() as comm:
                out = fn()
            a, b = _chunk_bounds(want.shape[out_dim], world, rank)
            ok = (comm.get_total_counts() == 0 and out.placements == (Shard(out_dim),)
                  and torch.equal(out.to_local(), want.narrow(out_dim, a, b - a)))
            results.append((name, ok, "" if ok else f"{out.placements} {comm.get_total_counts()}"))
        except Exception:
            results.append((name, False, traceback.format_exc()))
    return results


def _cases_2d(rank):
    """A 2 x 2 mesh: the distributed top-k with the other mesh dim sharding another dim, Partial,
    or nesting on the axis; scatter with indexed dims sharded by both mesh dims or one of them
    and a trailing dim by the other; the backward of a gather sharded on two dims."""
    from torch.distributed.tensor import (DTensor, Partial, Replicate, Shard, distribute_tensor,
                                          init_device_mesh)
    from torch.distributed.tensor.debug import CommDebugMode

    import torch_dml_ops as tdo
    from torch_dml_ops import _compat
    from torch_dml_ops.distributed._placements import local_bounds
    mesh = init_device_mesh("cpu", (2, 2))
    coord = mesh.get_coordinate()

    def box(x, placements):
        placements = [Replicate() if isinstance(p, Partial) else p for p in placements]
        return tuple(slice(a, b) for a, b in local_bounds(x.shape, mesh, placements))

    def place(x, placements):
        if any(isinstance(p, Partial) for p in placements):   # x on one rank, -0.0 elsewhere
            m = [isinstance(p, Partial) for p in placements].index(True)   # (x + -0.0 is x)
            x = x if coord[m] == 0 else torch.full_like(x, -0.0)
        local = x[box(x, placements)].contiguous()
        return DTensor.from_local(local, mesh, placements, run_check=False, shape=x.shape,
                                  stride=x.stride())

    def record(name, fn):
        try:
            ok, detail = fn()
            results.append((name, bool(ok), "" if ok else str(detail)))
        except Exception:
            results.append((name, False, traceback.format_exc()))

    results = []
    x = torch.arange(6 * 13 * 2, dtype=torch.float32).reshape(6, 13, 2)
    for placements in ([Shard(1), Shard(1)], [Shard(0), Shard(1)], [Shard(2), Shard(0)]):
        record(f"local_bounds is DTensor's split {placements}", lambda: (
            torch.equal(distribute_tensor(x, mesh, placements).to_local(),
                        x[box(x, placements)]), placements))
    pool = torch.tensor([0., -0., 1., float("nan"), float("inf"), -1.])
    axis_placements = {"other dim + axis": ([Shard(0), Shard(1)], 1, [Shard(0), Replicate()]),
                       "axis nested": ([Shard(1), Shard(1)], 2, [Replicate(), Replicate()]),
                       "axis + other dim": ([Shard(1), Shard(0)], 1, [Replicate(), Shard(0)]),
                       "Partial + axis": ([Partial(), Shard(1)], 2, [Replicate(), Replicate()])}
    for dtype in (torch.float32, torch.bfloat16, torch.int32, torch.uint16):
        g = torch.Generator().manual_seed(21)
        x = pool[torch.randint(0, 6, (6, 13), generator=g)]
        x = x.to(dtype) if dtype.is_floating_point else x.nan_to_num(0, 5, 1).abs().to(dtype)
        for pname, (placements, comms, out_pl) in axis_placements.items():
            if pname.startswith("Partial") and not dtype.is_floating_point:
                continue                            # (an unsigned Partial would wrap)
            for direction in ("decreasing", "increasing"):
                for k in (1, 5, 13):
                    def case():
                        idt = torch.uint32 if k == 5 else torch.int64
                        with CommDebugMode() as comm:
                            v, i = tdo.top_k1(place(x, placements), k, direction=direction,
                                              index_dtype=idt)
                        ev, ei = tdo.top_k1(x, k, direction=direction, index_dtype=idt)
                        b = box(ev, out_pl)
                        return (same(v.to_local(), ev[b]) and torch.equal(i.to_local(), ei[b])
                                and list(v.placements) == out_pl
                                and comm.get_total_counts() == comms), (
                            v.placements, comm.get_total_counts(), v.to_local(), ev[b])
                    record(f"2-D top_k1 {pname} {dtype} {direction} k={k}", case)

    for n in (1, 2, 3):                     # nested chunks that are empty on some ranks
        for k in range(1, n + 1):
            def case():
                x = torch.tensor([[2., float("nan"), 2.][:n], [-0., 0., 1.][:n]])
                with CommDebugMode() as comm:
                    v, i = tdo.top_k1(place(x, [Shard(1), Shard(1)]), k)
                ev, ei = tdo.top_k1(x, k)
                return (same(v.to_local(), ev) and torch.equal(i.to_local(), ei)
                        and comm.get_total_counts() == 2), (v.to_local(), ev)
            record(f"2-D top_k1 axis nested, n={n} k={k}", case)

    def topk_grad():
        x = torch.randn(6, 13, generator=torch.Generator().manual_seed(22), dtype=torch.float64)
        dx = place(x, [Shard(1), Shard(1)]).detach().requires_grad_()
        w = torch.arange(1., 6, dtype=torch.float64)
        (tdo.top_k1(dx, 5)[0].to_local() * w).sum().backward()
        xr = x.clone().requires_grad_()
        (tdo.top_k1(xr, 5)[0] * w).sum().backward()
        if not _compat.DTENSOR_GRAD_KEEPS_SHARDS:   # torch 2.10 replicates it: same values
            return torch.equal(dx.grad.full_tensor(), xr.grad), dx.grad
        return torch.equal(dx.grad.to_local(), xr.grad[box(x, [Shard(1), Shard(1)])]), dx.grad
    record("2-D top_k1 nested axis gradient", topk_grad)

    base = torch.randn(11, 5, 4, generator=torch.Generator().manual_seed(23), dtype=torch.float64)
    idx = torch.tensor([[3, 1], [-1, 0], [3, 1], [0, 2], [10, -1], [5, 4], [3, 1], [-11, 0]])
    upd = torch.randn(8, 4, generator=torch.Generator().manual_seed(24), dtype=torch.float64)
    layouts = {
        "indexed dim + trailing dim, updates sharded": ([Shard(0), Shard(2)], [Replicate(), Shard(1)]),
        "indexed dim + trailing dim, updates replicated": ([Shard(0), Shard(2)], None),
        "two indexed dims": ([Shard(1), Shard(0)], None),
        "indexed dim nested": ([Shard(0), Shard(0)], None),
        "replicate + indexed dim": ([Replicate(), Shard(1)], None),
    }
    for lname, (in_pl, up_pl) in layouts.items():
        for reduction in ("none", "add", "mul", "max", "min"):
            def case():
                want = tdo.scatter_nd(base, idx, upd, reduction)
                u = place(upd, up_pl) if up_pl else upd
                with CommDebugMode() as comm:
                    got = tdo.scatter_nd(place(base, in_pl), idx, u, reduction)
                    target = place(base.clone(), in_pl)
                    same_obj = tdo.scatter_nd_(target, idx, u, reduction) is target
                b = box(base, in_pl)
                return (comm.get_total_counts() == 0 and same_obj
                        and list(got.placements) == in_pl and torch.equal(got.to_local(), want[b])
                        and torch.equal(target.to_local(), want[b])), (
                    comm.get_total_counts(), got.placements)
            record(f"2-D scatter_nd {lname} {reduction}", case)
        def grads():
            xs = place(base, in_pl).detach().requires_grad_()
            us = (place(upd, up_pl) if up_pl else
                  DTensor.from_local(upd, mesh, [Replicate(), Replicate()])).detach().requires_grad_()
            w = torch.arange(220, dtype=torch.float64).reshape(11, 5, 4)
            (tdo.scatter_nd(xs, idx, us, "add").full_tensor() * w).sum().backward()
            xr, ur = base.clone().requires_grad_(), upd.clone().requires_grad_()
            (tdo.scatter_nd(xr, idx, ur, "add") * w).sum().backward()
            return (torch.equal(xs.grad.full_tensor(), xr.grad)
                    and torch.equal(us.grad.full_tensor(), ur.grad)), us.grad
        record(f"2-D scatter_nd {lname} gradient", grads)
    def out_of_range():
        try:
            tdo.scatter_nd(place(base, [Shard(0), Shard(1)]), torch.tensor([[1, 5]]), upd[:1])
        except IndexError as e:
            with pytest.raises(IndexError) as want:
                tdo.scatter_nd(base, torch.tensor([[1, 5]]), upd[:1])
            return str(e) == str(want.value), str(e)
        return False, "no IndexError"
    record("2-D scatter_nd out-of-range index: the single-device IndexError", out_of_range)

    def gather_grad():
        x = torch.randint(-5, 6, (4, 7, 6), generator=torch.Generator().manual_seed(25)).double()
        i = torch.tensor([[[1], [6], [1]], [[-1], [1], [2]], [[0], [0], [0]], [[3], [-7], [5]]])
        gw = torch.randint(-5, 6, (4, 3, 6), generator=torch.Generator().manual_seed(26)).double()
        xr = x.clone().requires_grad_()
        tdo.gather_nd(xr, i, 1).backward(gw)
        dx = place(x, [Shard(0), Shard(2)]).detach().requires_grad_()
        out = tdo.gather_nd(dx, place(i, [Shard(0), Replicate()]), 1)
        with CommDebugMode() as comm:
            out.backward(place(gw, [Shard(0), Shard(2)]))
        return (comm.get_total_counts() == 0 and list(out.placements) == [Shard(0), Shard(2)]
                and list(dx.grad.placements) == [Shard(0), Shard(2)]
                and torch.equal(dx.grad.full_tensor(), xr.grad)), (out.placements, dx.grad.placements)
    record("2-D gather_nd backward, batch and trailing dims sharded", gather_grad)
    return results


def _worker(rank, world, path, queue):
    os.environ.setdefault("TRITON_INTERPRET", "1")
    dist.init_process_group("gloo", init_method=f"file://{path}", rank=rank, world_size=world)
    try:
        results = _cases_2d(rank) if world == 4 else _cases(world, rank)
    except Exception:
        results = [("worker", False, traceback.format_exc())]
    queue.put((rank, results))
    dist.barrier()
    dist.destroy_process_group()


CASES = {2: 662, 3: 662, 4: 126}     # per rank


@pytest.mark.parametrize("world", [2, 3, 4], ids=["2 ranks", "3 ranks", "2x2 mesh"])
def test_dtensor_cases_match_one_process(world, tmp_path):
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(r, world, str(tmp_path / "store"), queue))
             for r in range(world)]
    for p in procs:
        p.start()
    got = dict(queue.get(timeout=240) for _ in range(world))
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    failures = [(r, n, d) for r, res in got.items() for n, ok, d in res if not ok]
    total = sum(len(res) for res in got.values())
    assert total == world * CASES[world] and not failures, (total, failures[:5])
