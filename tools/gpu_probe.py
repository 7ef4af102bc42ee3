"""One-off probe of the cuDNN frontend API on the GPU host (kept as a record of what was checked)."""
import json, sys, time, traceback
import cupy as cp
import cudnn

out = {}
out["cudnn_backend"] = cudnn.backend_version()
out["frontend"] = getattr(cudnn, "__version__", "?")
out["cupy"] = cp.__version__
props = cp.cuda.runtime.getDeviceProperties(0)
out["gpu"] = props["name"].decode()
out["driver"] = cp.cuda.runtime.driverGetVersion()
out["runtime"] = cp.cuda.runtime.runtimeGetVersion()
print(json.dumps(out))
print("numerical notes:", [n for n in dir(cudnn.numerical_note) if not n.startswith("_")])
print("behavior notes:", [n for n in dir(cudnn.behavior_note) if not n.startswith("_")])
print("heur modes:", [n for n in dir(cudnn.heur_mode) if not n.startswith("_")])

h = cudnn.create_handle()
stream = cp.cuda.Stream(non_blocking=True)
cudnn.set_stream(handle=h, stream=stream.ptr)
F = cudnn.data_type.FLOAT

def strides(n, c, hh, ww):
    return [c * hh * ww, hh * ww, ww, 1]

def graph(kind, n, c, hh, ww, k, r, pad, note=None):
    oh = hh + 2 * pad - r + 1
    g = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F, handle=h)
    X = g.tensor(name="X", dim=[n, c, hh, ww], stride=strides(n, c, hh, ww), data_type=F)
    W = g.tensor(name="W", dim=[k, c, r, r], stride=strides(k, c, r, r), data_type=F)
    DY = g.tensor(name="DY", dim=[n, k, oh, oh], stride=strides(n, k, oh, oh), data_type=F)
    if kind == "F":
        Y = g.conv_fprop(image=X, weight=W, padding=[pad, pad], stride=[1, 1], dilation=[1, 1], compute_data_type=F)
        Y.set_output(True).set_dim([n, k, oh, oh]).set_stride(strides(n, k, oh, oh)).set_data_type(F)
        io = (X, W, Y)
    elif kind == "BD":
        DX = g.conv_dgrad(loss=DY, filter=W, padding=[pad, pad], stride=[1, 1], dilation=[1, 1], compute_data_type=F)
        DX.set_output(True).set_dim([n, c, hh, ww]).set_stride(strides(n, c, hh, ww)).set_data_type(F)
        io = (DY, W, DX)
    else:
        DW = g.conv_wgrad(image=X, loss=DY, padding=[pad, pad], stride=[1, 1], dilation=[1, 1], compute_data_type=F)
        DW.set_output(True).set_dim([k, c, r, r]).set_stride(strides(k, c, r, r)).set_data_type(F)
        io = (X, DY, DW)
    g.validate()
    g.build_operation_graph()
    if note is not None:
        g.select_numeric_notes([note])
    g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
    return g, io

for kind in ("F", "BD", "BF"):
    t0 = time.perf_counter()
    g, io = graph(kind, 256, 96, 27, 27, 256, 5, 2)
    t1 = time.perf_counter()
    cnt = g.get_execution_plan_count()
    rows = []
    for i in range(cnt):
        tb = time.perf_counter()
        try:
            g.build_plan_at_index(i)
            ws = g.get_workspace_size_plan_at_index(i)
            eid, knobs = g.get_engine_and_knobs_at_index(i)
            rows.append((i, g.get_plan_name_at_index(i), ws, eid, {str(k): v for k, v in knobs.items()},
                         [str(b) for b in g.get_behavior_notes_for_plan_at_index(i)], round(time.perf_counter() - tb, 3)))
        except Exception as e:
            rows.append((i, "FAIL", type(e).__name__, str(e)[:120], round(time.perf_counter() - tb, 3)))
    print(kind, "create", round(t1 - t0, 3), "s; plans", cnt, "build total", round(time.perf_counter() - t1, 2))
    for r in rows:
        print("  ", r)
    # labels via sibling graphs
    for note in ("TENSOR_CORE", "NONDETERMINISTIC", "FFT", "DOWN_CONVERT_INPUTS"):
        try:
            g2, _ = graph(kind, 256, 96, 27, 27, 256, 5, 2, note=getattr(cudnn.numerical_note, note))
            names = []
            for i in range(g2.get_execution_plan_count()):
                try:
                    names.append(g2.get_plan_name_at_index(i))
                except Exception as e:
                    names.append("ERR:" + type(e).__name__)
            print("   note", note, len(names), names[:6])
        except Exception as e:
            print("   note", note, "failed:", type(e).__name__, str(e)[:150])

# execution paths on forward
g, (X, W, Y) = graph("F", 128, 96, 27, 27, 256, 5, 2)
x = cp.random.standard_normal((256, 96, 27, 27), dtype=cp.float32)
w = cp.random.standard_normal((256, 96, 5, 5), dtype=cp.float32)
y = cp.full((256, 256, 27, 27), cp.nan, dtype=cp.float32)
idx = None
for i in range(g.get_execution_plan_count()):
    try:
        g.build_plan_at_index(i)
        if g.get_workspace_size_plan_at_index(i) < 64 << 20:
            idx = i
            break
    except Exception:
        pass
ws = cp.empty(max(1, g.get_workspace_size_plan_at_index(idx)), dtype=cp.uint8)
print("plan", idx, g.get_plan_name_at_index(idx), "cfg", g._plans[idx])
with stream:
    g.execute_plan_at_index({X: x[128:], W: w, Y: y[128:]}, ws, idx, handle=h)
    stream.synchronize()
    print("first half untouched (nan):", bool(cp.isnan(y[:128]).all()), "second half written:", bool(~cp.isnan(y[128:]).any()))
    lg = g._lowered_graph
    cfg = g._plans[idx]
    from cudnn._handle import to_backend_handle
    bh = to_backend_handle(h)
    pack = {X.uid: x.data.ptr, W.uid: w.data.ptr, Y.uid: y.data.ptr}
    y2 = cp.full_like(y, cp.nan)
    pack2 = {X.uid: x.data.ptr, W.uid: w.data.ptr, Y.uid: y2.data.ptr}
    try:
        lg._execute_plan_at_index(pack2, ws.data.ptr, cfg.cpp_index, bh)
        stream.synchronize()
        ref = y2[:128]
        g.execute_plan_at_index({X: x[:128], W: w, Y: y[:128]}, ws, idx, handle=h)
        stream.synchronize()
        print("lowered path equals python path:", float(cp.abs(ref - y[:128]).max()))
        # timing: host per call
        for path in ("lowered", "python"):
            n = 200
            e0, e1 = cp.cuda.Event(), cp.cuda.Event()
            t0 = time.perf_counter(); e0.record(stream)
            for _ in range(n):
                if path == "lowered":
                    lg._execute_plan_at_index(pack2, ws.data.ptr, cfg.cpp_index, bh)
                else:
                    g.execute_plan_at_index({X: x[:128], W: w, Y: y[:128]}, ws, idx, handle=h)
            t_host = (time.perf_counter() - t0) / n * 1e6
            e1.record(stream); e1.synchronize()
            print(path, "host us/call", round(t_host, 1), "gpu ms/call", cp.cuda.get_elapsed_time(e0, e1) / n)
    except Exception:
        traceback.print_exc()

# spin kernel for blocking
spin = cp.RawKernel(r'''extern "C" __global__ void spin(long long c){ long long t=clock64(); while(clock64()-t<c){} }''', "spin")
e0, e1 = cp.cuda.Event(), cp.cuda.Event()
with stream:
    e0.record(stream); spin((1,), (1,), (cp.int64(2_000_000),), stream=stream); e1.record(stream); e1.synchronize()
print("spin 2M cycles ms", cp.cuda.get_elapsed_time(e0, e1))
# replay: fresh graph, create_execution_plan(engine, knobs)
g3, (X3, W3, Y3) = graph("F", 128, 96, 27, 27, 256, 5, 2)
eid, knobs = g.get_engine_and_knobs_at_index(idx)
gg = cudnn.pygraph(io_data_type=F, intermediate_data_type=F, compute_data_type=F, handle=h)
Xr = gg.tensor(name="X", dim=[128, 96, 27, 27], stride=strides(0, 96, 27, 27), data_type=F)
Wr = gg.tensor(name="W", dim=[256, 96, 5, 5], stride=strides(0, 96, 5, 5), data_type=F)
Yr = gg.conv_fprop(image=Xr, weight=Wr, padding=[2, 2], stride=[1, 1], dilation=[1, 1], compute_data_type=F)
Yr.set_output(True).set_dim([128, 256, 27, 27]).set_stride(strides(0, 256, 27, 27)).set_data_type(F)
gg.validate(); gg.build_operation_graph()
t0 = time.perf_counter()
gg.create_execution_plan(eid, knobs)
j = gg.get_execution_plan_count() - 1
gg.build_plan_at_index(j)
print("replay", j, gg.get_plan_name_at_index(j), "==", g.get_plan_name_at_index(idx), gg.get_workspace_size_plan_at_index(j), "cpp", gg._plans[j].cpp_index, round(time.perf_counter() - t0, 3), "s")
print("serialize?", hasattr(gg, "serialize"))
