#!/usr/bin/env python3
"""PyTorch counterpart of apps/bench_attention: softmax vs linear attention per sequence length,
forward and forward+backward time, peak memory and tokens/s, with the same flags, table and
--json keys, so the two can be compared row by row.

    python3 tools/bench_attention_torch.py [--device cpu|cuda] [--threads N] [--lengths 256,...]
        [--batch 1] [--heads N] [--head-dim 64] [--maps softmax,hedgehog,elu,taylor]
        [--forms chunked,quadratic,recurrent] [--gate none,decay,gla,delta] [--chunk 64] [--window 64]
        [--reps 3] [--json FILE] [--compare HH_JSON]

Rows (q, k, v random (B,H,L,D) f32 leaves requiring grad; φ applied inside the timed region):
  softmax    F.scaled_dot_product_attention(is_causal=True) (on the CPU a flash-style kernel that
             never materializes the (L,L) weights, unlike hedgehog's composed softmax); with
             --softmax math: scores, causal mask, softmax, matmul as separate ops (as hedgehog)
  chunked    a straightforward chunked causal linear attention in torch ops: per-chunk masked
             (C,C) products plus an exclusive prefix sum of the per-chunk φkᵀv states; autograd
             does the backward (it keeps the (L/C,F,D) states)
  quadratic  tril(φq φkᵀ), row-normalized, times v
  recurrent  a Python loop over tokens carrying S (F,D) and z (F)
  fla        FLA's Triton kernels (fla-core: fla.ops.linear_attn.chunk_linear_attn, scale 1,
             normalize=True) on the same φq, φk; CUDA only (pip install fla-core). --compare sets
             it beside hedgehog's chunked row
Hybrid maps (hybrid-<map>, LoLCATs' softmax window of the last --window keys + linear attention
with <map> on the earlier keys, one shared normalizer; autograd/ops/hybrid_attention.h), the same
arithmetic as hedgehog's ops: wf = sigmoid(p) (p (H) init 0, a leaf), lf = 1, scale 1/sqrt(D),
window scores exp(s·q·k - max over the window), no eps:
  chunked    hybrid_attention_chunked's algorithm: query blocks of --chunk rows; each block's band
             tile of chunk+W-1 keys (an unfold of the keys padded with W-1 zero rows in front)
             holds its window part and the linear keys inside the band; the keys before the band
             come from an exclusive prefix sum of per-block φkᵀv and Σφk states
  quadratic  the (L,L) weights materialized (hybrid_attention_quadratic)
  recurrent  skipped (the decoding step is not a training form)
Before timing, the chunked twin is checked against the quadratic one in f64, values and
gradients (≤ 1e-10 relative).
Gated rows (--gate, a comma list, default none; each pure linear map once per gate, named
"<map>+<gate>"; softmax and hybrids ungated), the arithmetic of hedgehog's gated ops on φq, φk
with normalize=True, eps 1e-6 (as the engine's gated mixer); the gate's inputs are drawn after dy,
outside the timed region, as leaves requiring grad (decay's fixed gate excepted):
  decay      log_a (B,H,L,1) = RetNet's log(1 - 2^(-5-h)) per head
  gla        log_a (B,H,L,F) = logsigmoid(z)/16, z ~ N(0,1) (GLA's gate_logit_normalizer)
    chunked    gated_attention_chunked's algorithm: v with a column of ones (the normalizer),
               chunks of --chunk tokens, log gates cumsummed from the chunk start; inside a chunk
               a per-head gate's decays exp(b_r - b_s) directly, a per-channel gate's through
               sub-blocks of gcd(chunk,16) tokens with the reference point e_i (the cumsum before
               sub-block i): q·exp(b_r - e_i) · k·exp(e_i - b_s) for earlier sub-blocks, pairs
               inside one exponentiated one by one; a Python loop scans the per-chunk states
    quadratic  gated_attention_quadratic: (B,H,L,L) decays ((B,H,L,L,F) for gla, skipped when
               above --max-gated-quadratic-mib, 512) of global cumsums
    recurrent  a Python loop over tokens carrying S (F,D) and z (F), both decayed
  delta      the gated delta rule on l2-normalized φq, φk (nn::delta_l2norm), scale 1/sqrt(F),
             β = sigmoid(z) and log α = logsigmoid(z')/16 (B,H,L)
    chunked    delta_attention_chunked's WY form: segment sums of log α inside a chunk, T by
               torch.linalg.solve_triangular (hedgehog: unit_lower_inverse), W, U, a Python loop
               over chunks for the state; quadratic: skipped (no such form)
    recurrent  a Python loop over tokens (S = α S; u = β (v − Sᵀk); S += k uᵀ)
Before timing, each gate's chunked (and quadratic) twin is checked against its recurrent loop in
f64, values and gradients of every input (≤ 1e-10 relative; chunk --chunk and 20, L = 3·chunk+5).
Feature maps as in nn/feature_maps.cpp: hedgehog (per-head identity-initialized W (H,D,D), b = 0,
φ = [softmax(xW+b), softmax(-(xW+b))], F = 2D), elu (elu(x)+1, F = D), taylor (1, x/D^¼,
vec(xxᵀ)/(√2·√D), F = 1+D+D²), relu.
"fwd" runs under torch.no_grad(); "fwd+bwd" backpropagates a fixed random dy. Median of --reps
after one warm-up. Peak memory = peak allocation during one extra run minus what was allocated
before it, in MiB: torch.cuda.max_memory_allocated on CUDA; on the CPU the allocation events of
torch.profiler(profile_memory=True) (n/a if this torch's profiler lacks them).
Skips as bench_attention: quadratic above --max-quadratic-len (4096), recurrent above
--max-recurrent-len (1024) or when its per-token states (L·B·H·F·D·4 bytes) exceed
--max-recurrent-mib (2048), taylor above --max-taylor-len (2048); gated rows too.
--compare reads bench_attention's --json and adds hh/torch time ratios (> 1: hedgehog slower).
"""
import argparse
import math
import os
import statistics
import sys
import time

from torch_bench_common import load_compare, setup_torch, write_json  # noqa: E402

os.environ.setdefault("KINETO_LOG_LEVEL", "5")  # quieter profiler (used for CPU peak memory)

WARMUP = 1
EPS = 1e-6
MIB = 1024.0 * 1024.0
BASE_MAPS = ("softmax", "hedgehog", "elu", "relu", "taylor")
MAPS = BASE_MAPS + tuple("hybrid-" + m for m in BASE_MAPS[1:])
BLOCKED = -1e30  # a blocked window score: exp(BLOCKED - m) is 0 next to any real score
FORMS = ("chunked", "quadratic", "recurrent")
TWIN_FORMS = ("fla",)  # forms only the twin has; compared with hedgehog's chunked row
GATES = ("none", "decay", "gla", "delta")
GATE_NORMALIZER = 16.0  # GLA's gate_logit_normalizer (nn::kGateLogitNormalizer)


class Parser(argparse.ArgumentParser):
    def error(self, message):  # "error: ..." and exit status 1, like bench_attention
        sys.stderr.write(f"error: {message}\n")
        sys.exit(1)


def int_list(text):
    try:
        vals = [int(v) for v in text.split(",") if v]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got '{text}'")
    if not vals or any(v < 1 for v in vals):
        raise argparse.ArgumentTypeError(f"expected comma-separated positive integers, got '{text}'")
    return vals


def name_list(allowed):
    def parse(text):
        vals = [v for v in text.split(",") if v]
        bad = [v for v in vals if v not in allowed]
        if not vals or bad:
            raise argparse.ArgumentTypeError(f"unknown name(s) {bad or text!r}; expected some of {', '.join(allowed)}")
        return vals
    return parse


def gate_list(text):
    vals = name_list(GATES)(text)
    twice = sorted({v for v in vals if vals.count(v) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"'{twice[0]}' is listed twice")
    return vals


def nonneg_int(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got '{text}'")
    if v < 0:
        raise argparse.ArgumentTypeError(f"expected a non-negative integer, got '{text}'")
    return v


def positive_int(text):
    v = nonneg_int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got '{text}'")
    return v


# ---------------------------------------------------------------- memory

def cpu_peak_bytes(torch, fn):
    """Peak of the running sum of CPU allocations made by fn() (bytes above the start), or None."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    try:
        tree = prof.profiler.kineto_results.experimental_event_tree()
    except AttributeError:
        return None
    allocs = []
    stack = list(tree)
    while stack:
        n = stack.pop()
        if type(n.extra_fields).__name__ == "_ExtraFields_Allocation" and n.extra_fields.device.type == "cpu":
            allocs.append((n.start_time_ns, n.extra_fields.alloc_size))
        stack.extend(n.children)
    if not allocs:
        return None
    allocs.sort()
    cur = peak = 0
    for _, size in allocs:
        cur += size
        peak = max(peak, cur)
    return peak


def measure(torch, device, reps, prep, fn):
    """(median ms, peak MiB or None) of fn() after WARMUP runs; prep() runs untimed before each."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(WARMUP):
        prep()
        fn()
    ts = []
    for _ in range(reps):
        prep()
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t0)
    prep()
    if device.type == "cuda":
        sync()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        sync()
        peak = (torch.cuda.max_memory_allocated(device) - base) / MIB
    else:
        try:
            p = cpu_peak_bytes(torch, fn)
            peak = None if p is None else p / MIB
        except Exception:  # a profiler without allocation events: memory is reported as n/a
            peak = None
    return statistics.median(ts) * 1e3, peak


# ---------------------------------------------------------------- feature maps and forms

def make_feature_map(torch, name, H, D, device):
    """(φ(x, is_query), F, parameters)."""
    F = torch.nn.functional
    if name == "elu":
        return (lambda x, is_q: F.elu(x) + 1), D, []
    if name == "relu":
        return (lambda x, is_q: F.relu(x)), D, []
    if name == "taylor":
        c1, c2 = D ** -0.25, 1.0 / (math.sqrt(2.0) * math.sqrt(D))

        def taylor(x, is_q):
            B, Hh, L, _ = x.shape
            quad = (x.unsqueeze(-1) * x.unsqueeze(-2)).reshape(B, Hh, L, D * D)
            return torch.cat([torch.ones(B, Hh, L, 1, dtype=x.dtype, device=x.device), x * c1, quad * c2], -1)
        return taylor, 1 + D + D * D, []
    if name == "hedgehog":
        W = torch.eye(D, device=device).repeat(H, 1, 1).requires_grad_()  # (H,D,D)
        b = torch.zeros(H, D, device=device, requires_grad=True)

        def hedgehog(x, is_q):
            z = torch.matmul(x, W.unsqueeze(0)) + b[None, :, None, :]  # (B,H,L,D)
            return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)
        return hedgehog, 2 * D, [W, b]
    raise ValueError(f"unknown feature map '{name}'")


def linear_chunked(torch, pq, pk, v, C, eps):
    """Causal linear attention in chunks of C: pq, pk (B,H,L,F), v (B,H,L,D) -> (B,H,L,D)."""
    B, H, L, Fd = pq.shape
    D = v.shape[-1]
    pad = (-L) % C
    if pad:  # zero keys add nothing; padded query rows are sliced off
        pq = torch.nn.functional.pad(pq, (0, 0, 0, pad))
        pk = torch.nn.functional.pad(pk, (0, 0, 0, pad))
        v = torch.nn.functional.pad(v, (0, 0, 0, pad))
    N = (L + pad) // C
    q = pq.reshape(B, H, N, C, Fd)
    k = pk.reshape(B, H, N, C, Fd)
    vv = v.reshape(B, H, N, C, D)
    kv = torch.matmul(k.transpose(-1, -2), vv)   # (B,H,N,F,D) per-chunk state
    S = kv.cumsum(2) - kv                        # state of all earlier chunks
    ks = k.sum(3)                                # (B,H,N,F)
    z = ks.cumsum(2) - ks
    a = torch.matmul(q, k.transpose(-1, -2)).tril()  # (B,H,N,C,C) within the chunk
    num = torch.matmul(a, vv) + torch.matmul(q, S)
    den = a.sum(-1) + (q * z.unsqueeze(3)).sum(-1)   # (B,H,N,C)
    y = num / (den.unsqueeze(-1) + eps)
    return y.reshape(B, H, N * C, D)[:, :, :L]


def linear_fla(pq, pk, v):
    """FLA's chunked causal linear attention: (B,H,L,F), (B,H,L,F), (B,H,L,D) -> (B,H,L,D)."""
    from fla.ops.linear_attn import chunk_linear_attn  # imported here: only the fla form needs it
    bt = lambda x: x.transpose(1, 2).contiguous()  # noqa: E731  FLA takes (B,L,H,.)
    o, _ = chunk_linear_attn(bt(pq), bt(pk), bt(v), scale=1.0, normalize=True)
    return o.transpose(1, 2)


def hybrid_quadratic(torch, q, k, v, pq, pk, wf, lf, W):
    """hybrid_attention_quadratic: (B,H,L,.) inputs, wf, lf (H) -> (B,H,L,Dv) via (L,L) weights."""
    L = q.shape[2]
    i = torch.arange(L, device=q.device)
    d = i[:, None] - i[None, :]                       # query - key
    win = (d >= 0) & (d < W)
    lin = d >= W
    sc = torch.matmul(q, k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    sc = sc.masked_fill(~win, BLOCKED)
    m = sc.amax(-1, keepdim=True)
    aw = torch.exp(sc - m) * win.to(q.dtype) * wf[None, :, None, None]
    al = torch.matmul(pq, pk.transpose(-1, -2)) * lin.to(q.dtype) * lf[None, :, None, None]
    a = aw + al
    den = a.sum(-1, keepdim=True)
    return torch.matmul(a / (den + (den == 0).to(den.dtype)), v)


def hybrid_chunked(torch, q, k, v, pq, pk, wf, lf, W, T):
    """hybrid_attention_chunked's arithmetic: band tiles (window + linear keys in the band) plus
    the exclusive prefix state of the keys before the band."""
    pad = torch.nn.functional.pad
    B, H, L, D = q.shape
    Dv, Fd = v.shape[-1], pq.shape[-1]
    W = min(W, L)
    nb = (L + T - 1) // T
    P, E = nb * T, T + W - 1
    rows = lambda x, a, b: pad(x, (0, 0, a, b))  # noqa: E731  zero rows before/after along L
    kp, vp, pkp = rows(k, W - 1, P - L), rows(v, W - 1, P - L), rows(pk, W - 1, P - L)
    tiles = lambda x: x.unfold(2, E, T).transpose(-1, -2)  # noqa: E731  (B,H,nb,E,C)
    kt, vt, pkt = tiles(kp), tiles(vp), tiles(pkp)
    dev = q.device
    r = torch.arange(T, device=dev)[:, None]
    u = torch.arange(E, device=dev)[None, :]
    key = torch.arange(nb, device=dev)[:, None, None] * T - (W - 1) + u  # (nb,1,E) key index
    win = (u >= r) & (u <= r + W - 1) & (key >= 0) & (key < L)           # (nb,T,E)
    lin = (u < r).to(q.dtype)                                            # (T,E)
    qb = rows(q, 0, P - L).reshape(B, H, nb, T, D)
    pqb = rows(pq, 0, P - L).reshape(B, H, nb, T, Fd)
    wf5, lf5 = wf[None, :, None, None, None], lf[None, :, None, None, None]
    sc = torch.matmul(qb, kt.transpose(-1, -2)) * D ** -0.5             # (B,H,nb,T,E)
    sc = sc.masked_fill(~win, BLOCKED)
    m = sc.amax(-1, keepdim=True)
    aw = torch.exp(sc - m) * win.to(q.dtype) * wf5
    al = torch.matmul(pqb, pkt.transpose(-1, -2)) * lin * lf5
    a = aw + al
    num = torch.matmul(a, vt)                                           # (B,H,nb,T,Dv)
    den = a.sum(-1, keepdim=True)
    pk_blk = pkp[:, :, :P].reshape(B, H, nb, T, Fd)
    v_blk = vp[:, :, :P].reshape(B, H, nb, T, Dv)
    U = torch.matmul(pk_blk.transpose(-1, -2), v_blk)                   # (B,H,nb,F,Dv)
    Z = pk_blk.sum(3, keepdim=True)                                     # (B,H,nb,1,F)
    S, z = U.cumsum(2) - U, Z.cumsum(2) - Z                             # exclusive prefixes
    num = num + torch.matmul(pqb, S) * lf5
    den = den + torch.matmul(pqb, z.transpose(-1, -2)) * lf5
    y = num / (den + (den == 0).to(den.dtype))
    return y.reshape(B, H, P, Dv)[:, :, :L]


def check_hybrid(torch, name, H, D, chunk, W):
    """The chunked twin equals the quadratic one (f64, values; L not a multiple of the chunk)."""
    phi, _, _ = make_feature_map(torch, name, H, D, torch.device("cpu"))
    g = torch.Generator().manual_seed(5)
    L = 3 * chunk + 5
    q, k, v = (torch.randn(1, H, L, D, generator=g, dtype=torch.float64) for _ in range(3))
    with torch.no_grad():
        pq, pk = phi(q.float(), True).double(), phi(k.float(), False).double()
    wf = torch.sigmoid(torch.randn(H, generator=g, dtype=torch.float64))
    lf = torch.ones(H, dtype=torch.float64)
    wy = torch.randn(1, H, L, v.shape[-1], generator=g, dtype=torch.float64)
    rel = lambda a, b: ((a - b).abs().max() / b.abs().max().clamp_min(1e-3)).item()  # noqa: E731
    for w in sorted({1, W, L + 3}):
        outs = []
        for fn in (lambda *x: hybrid_quadratic(torch, *x, w), lambda *x: hybrid_chunked(torch, *x, w, chunk)):
            xs = [t.clone().requires_grad_() for t in (q, k, v, pq, pk, wf, lf)]
            y = fn(*xs)
            (y * wy).sum().backward()
            outs.append([y.detach()] + [t.grad for t in xs])
        errs = [rel(a, b) for a, b in zip(outs[1], outs[0])]
        if not max(errs) <= 1e-10:
            sys.exit(f"error: hybrid-{name} chunked twin differs from the quadratic reference (W={w}): relative "
                     f"errors of y and the gradients of q, k, v, pq, pk, wf, lf {['%.3g' % e for e in errs]} > 1e-10")
    print(f"hybrid-{name}: chunked twin = quadratic reference in f64, values and gradients (W=1, {W}, {L + 3}; L={L})")


# ---------------------------------------------------------------- gated forms

def retnet_log_decays(H):
    """RetNet's per-head log γ_h = log(1 - 2^(-5-h)) (nn::retnet_log_decays)."""
    return [math.log1p(-2.0 ** (-5.0 - h)) for h in range(H)]


def make_gate_inputs(torch, gate, B, H, L, Fd, g, device):
    """A gated row's inputs besides q, k, v, drawn after dy as bench_attention does (its values
    differ: other generator): {'log_a': (B,H,L,1) fixed decay or (B,H,L,F) logsigmoid(z)/16 leaf}
    or {'beta': sigmoid(z), 'log_alpha': logsigmoid(z')/16} (B,H,L) leaves."""
    F = torch.nn.functional
    rnd = lambda *shape: torch.randn(shape, generator=g, device=device)  # noqa: E731
    if gate == "decay":
        d = torch.tensor(retnet_log_decays(H), device=device).reshape(1, H, 1, 1)
        return {"log_a": d.expand(B, H, L, 1).contiguous()}
    if gate == "gla":
        return {"log_a": (F.logsigmoid(rnd(B, H, L, Fd)) / GATE_NORMALIZER).requires_grad_()}
    return {"beta": torch.sigmoid(rnd(B, H, L)).requires_grad_(),
            "log_alpha": (F.logsigmoid(rnd(B, H, L)) / GATE_NORMALIZER).requires_grad_()}


def decay_matrix(torch, b):
    """exp(b_i - b_j) for j <= i, 0 above: b (..., n, G) -> (..., n, n, G); masked before exp."""
    n = b.shape[-2]
    diff = b.unsqueeze(-2) - b.unsqueeze(-3)
    future = torch.ones(n, n, dtype=torch.bool, device=b.device).triu(1).unsqueeze(-1)
    return torch.exp(diff.masked_fill(future, BLOCKED))


def channel_scores(p, k, d):
    """Σ_f p_if k_jf d_ijf: (..., n, F), (..., m, F), (..., n, m, F) -> (..., n, m)."""
    return (p.unsqueeze(-2) * k.unsqueeze(-3) * d).sum(-1)


def gated_intra_chunk(torch, qb, kb, gb, b):
    """gated_attention.cpp's intra_chunk: (B,H,N,C,F) blocks, log gates gb and their chunk-local
    cumsum b (B,H,N,C,G) -> A (B,H,N,C,C); per channel through sub-blocks of gcd(C,16) tokens with
    the reference point e_i (the cumsum before sub-block i)."""
    B, H, N, C, Fd = qb.shape
    if b.shape[-1] == 1:
        return torch.matmul(qb, kb.transpose(-1, -2)) * decay_matrix(torch, b).squeeze(-1)
    c = math.gcd(C, 16)
    ns = C // c
    sub = lambda x: x.reshape(B, H, N, ns, c, Fd)  # noqa: E731
    qs, ks, bs, gs = sub(qb), sub(kb), sub(b), sub(gb)
    e = bs[..., :1, :] - gs[..., :1, :]                       # (B,H,N,ns,1,F)
    qt = qs * torch.exp(bs - e)
    i = torch.arange(ns, device=b.device)[:, None]
    later = (torch.arange(C, device=b.device)[None, :] >= i * c).unsqueeze(-1)  # (ns,C,1)
    kt = kb.unsqueeze(3) * torch.exp((e - b.unsqueeze(3)).masked_fill(later, BLOCKED))  # (B,H,N,ns,C,F)
    a_off = torch.matmul(qt, kt.transpose(-1, -2))            # (B,H,N,ns,c,C)
    a_diag = channel_scores(qs, ks, decay_matrix(torch, bs))  # (B,H,N,ns,c,c)
    eye = torch.eye(ns, dtype=b.dtype, device=b.device).reshape(ns, 1, ns, 1)
    placed = (a_diag.unsqueeze(5) * eye).reshape(B, H, N, ns, c, C)
    return (a_off + placed).reshape(B, H, N, C, C)


def gated_chunked(torch, pq, pk, v, log_a, C, eps):
    """gated_attention_chunked (normalize=True): pq, pk (B,H,L,F), v (B,H,L,Dv), log_a (B,H,L,F or
    1) -> (B,H,L,Dv). v gains a column of ones (its output is the normalizer); chunks of C with the
    log gates cumsummed from the chunk start; a scan over the per-chunk states."""
    B, H, L, Fd = pq.shape
    vv = torch.cat([v, torch.ones(B, H, L, 1, dtype=v.dtype, device=v.device)], -1)
    E = vv.shape[-1]
    C = min(C, L)
    N = (L + C - 1) // C
    P = N * C
    blocks = lambda x: torch.nn.functional.pad(x, (0, 0, 0, P - L)).reshape(B, H, N, C, x.shape[-1])  # noqa: E731
    qb, kb, vb, gb = blocks(pq), blocks(pk), blocks(vv), blocks(log_a)
    b = gb.cumsum(3)                                           # (B,H,N,C,G), <= 0
    y = torch.matmul(gated_intra_chunk(torch, qb, kb, gb, b), vb)
    b_last = b[:, :, :, C - 1:C]                               # (B,H,N,1,G)
    u = torch.matmul((kb * torch.exp(b_last - b)).transpose(-1, -2), vb)  # (B,H,N,F,E)
    gam = torch.exp(b_last).transpose(-1, -2)                  # (B,H,N,G,1)
    S = torch.zeros(B, H, Fd, E, dtype=v.dtype, device=v.device)
    states = []
    for c in range(N):
        states.append(S)
        if c + 1 < N:
            S = S * gam[:, :, c] + u[:, :, c]
    y = y + torch.matmul(qb * torch.exp(b), torch.stack(states, 2))
    y = y.reshape(B, H, P, E)[:, :, :L]
    return y[..., :-1] / (y[..., -1:] + eps)


def gated_quadratic(torch, pq, pk, v, log_a, eps):
    """gated_attention_quadratic (normalize=True): the decays of global cumsums materialized."""
    b = log_a.cumsum(2)
    if b.shape[-1] == 1:
        a = torch.matmul(pq, pk.transpose(-1, -2)) * decay_matrix(torch, b).squeeze(-1)
    else:
        a = channel_scores(pq, pk, decay_matrix(torch, b))
    return torch.matmul(a / (a.sum(-1, keepdim=True) + eps), v)


def gated_recurrent(torch, pq, pk, v, log_a, eps):
    """A loop over tokens: S = diag(α) S + k vᵀ, z = α ⊙ z + k, y = qᵀS / (qᵀz + eps)."""
    B, H, L, Fd = pq.shape
    S = torch.zeros(B, H, Fd, v.shape[-1], dtype=v.dtype, device=v.device)
    z = torch.zeros(B, H, Fd, 1, dtype=v.dtype, device=v.device)
    ys = []
    for t in range(L):
        qt, kt, vt = pq[:, :, t:t + 1], pk[:, :, t:t + 1].transpose(-1, -2), v[:, :, t:t + 1]
        a = torch.exp(log_a[:, :, t:t + 1]).transpose(-1, -2)  # (B,H,G,1)
        S = S * a + torch.matmul(kt, vt)
        z = z * a + kt
        ys.append(torch.matmul(qt, S) / (torch.matmul(qt, z) + eps))
    return torch.cat(ys, 2)


def delta_l2norm(torch, x):
    """nn::delta_l2norm: x / sqrt(Σ x² + 1e-6) over the last dim."""
    return x * torch.rsqrt((x * x).sum(-1, keepdim=True) + 1e-6)


def delta_chunked(torch, q, k, v, beta, log_alpha, C):
    """delta_attention_chunked's WY form (scale 1/sqrt(Dk)): q, k (B,H,L,Dk), v (B,H,L,Dv), beta,
    log_alpha (B,H,L) -> (B,H,L,Dv). T = (I + strict lower of diag(β)(K Kᵀ ⊙ Γ))⁻¹ by
    torch.linalg.solve_triangular (hedgehog: unit_lower_inverse's block inversion)."""
    B, H, L, Dk = q.shape
    Dv = v.shape[-1]
    nb = (L + C - 1) // C
    P = nb * C
    blocks = lambda x: torch.nn.functional.pad(x, (0, 0, 0, P - L)).reshape(B, H, nb, C, x.shape[-1])  # noqa: E731
    qb, kb, vb = blocks(q * Dk ** -0.5), blocks(k), blocks(v)
    bb, lab = blocks(beta.unsqueeze(-1)), blocks(log_alpha.unsqueeze(-1))
    g = lab.cumsum(3)                                          # γ (B,H,nb,C,1)
    ones = torch.ones(C, C, dtype=q.dtype, device=q.device)
    seg = (lab.expand(B, H, nb, C, C) * ones.tril(-1)).cumsum(3)  # Σ_{j<s<=r} log α_s
    decay = torch.exp(seg) * ones.tril()                       # Γ_rj, 0 above the diagonal
    kt = kb.transpose(-1, -2)
    A = (torch.matmul(kb, kt) * decay * bb).tril(-1)
    eye = torch.eye(C, dtype=q.dtype, device=q.device)
    T = torch.linalg.solve_triangular(A + eye, eye.expand_as(A), upper=False, unitriangular=True)
    eg = torch.exp(g)
    W = torch.matmul(T, kb * (bb * eg))
    U = torch.matmul(T, vb * bb)
    e_last = torch.exp(g[:, :, :, C - 1:C])                    # (B,H,nb,1,1)
    kd = kt * decay[:, :, :, C - 1:C]                          # (B,H,nb,Dk,C)
    S = torch.zeros(B, H, Dk, Dv, dtype=v.dtype, device=v.device)
    states, news = [], []
    for c in range(nb):
        states.append(S)
        un = U[:, :, c] - torch.matmul(W[:, :, c], S)
        news.append(un)
        S = S * e_last[:, :, c] + torch.matmul(kd[:, :, c], un)
    aqk = torch.matmul(qb, kt) * decay
    o = torch.matmul(qb * eg, torch.stack(states, 2)) + torch.matmul(aqk, torch.stack(news, 2))
    return o.reshape(B, H, P, Dv)[:, :, :L]


def delta_recurrent(torch, q, k, v, beta, log_alpha):
    """A loop over tokens: S = α S, u = β (v − Sᵀk), S += k uᵀ, o = Sᵀ q / sqrt(Dk)."""
    B, H, L, Dk = q.shape
    q = q * Dk ** -0.5
    S = torch.zeros(B, H, Dk, v.shape[-1], dtype=v.dtype, device=v.device)
    os_ = []
    for t in range(L):
        qt, kt, vt = q[:, :, t:t + 1], k[:, :, t:t + 1], v[:, :, t:t + 1]
        S = S * torch.exp(log_alpha[:, :, t, None, None])
        u = (vt - torch.matmul(kt, S)) * beta[:, :, t, None, None]
        S = S + torch.matmul(kt.transpose(-1, -2), u)
        os_.append(torch.matmul(qt, S))
    return torch.cat(os_, 2)


def gated_forward(torch, gate, form, pq, pk, v, gi, chunk, eps):
    """The gated forms on φ(q), φ(k), as bench_attention's gated_forward."""
    if gate == "delta":
        dq, dk = delta_l2norm(torch, pq), delta_l2norm(torch, pk)
        if form == "chunked":
            return delta_chunked(torch, dq, dk, v, gi["beta"], gi["log_alpha"], chunk)
        return delta_recurrent(torch, dq, dk, v, gi["beta"], gi["log_alpha"])
    if form == "chunked":
        return gated_chunked(torch, pq, pk, v, gi["log_a"], chunk, eps)
    if form == "quadratic":
        return gated_quadratic(torch, pq, pk, v, gi["log_a"], eps)
    return gated_recurrent(torch, pq, pk, v, gi["log_a"], eps)


def check_gated(torch, gate, H, chunk):
    """The chunked (and quadratic) twins equal the recurrent loop (f64, values and gradients;
    features positive as a map's; L not a multiple of the chunk; the chunk itself and 20, whose
    sub-blocks are gcd(20,16) = 4 tokens)."""
    g = torch.Generator().manual_seed(6)
    Fd, Dv = 12, 8
    rel = lambda a, b: ((a - b).abs().max() / b.abs().max().clamp_min(1e-3)).item()  # noqa: E731
    forms = ("chunked",) if gate == "delta" else ("chunked", "quadratic")
    for C in sorted({chunk, 20}):
        L = 3 * C + 5
        pq, pk = (torch.softmax(torch.randn(1, H, L, Fd, generator=g, dtype=torch.float64), -1) for _ in range(2))
        v = torch.randn(1, H, L, Dv, generator=g, dtype=torch.float64)
        drawn = make_gate_inputs(torch, gate, 1, H, L, Fd, g, torch.device("cpu"))
        gi = {key: t.double().detach() for key, t in drawn.items()}
        wy = torch.randn(1, H, L, Dv, generator=g, dtype=torch.float64)

        def run(form):
            xs = [t.clone().requires_grad_() for t in [pq, pk, v] + list(gi.values())]
            y = gated_forward(torch, gate, form, xs[0], xs[1], xs[2], dict(zip(gi, xs[3:])), C, EPS)
            (y * wy).sum().backward()
            return [y.detach()] + [t.grad for t in xs]
        ref = run("recurrent")
        for form in forms:
            errs = [rel(a, b) for a, b in zip(run(form), ref)]
            if not max(errs) <= 1e-10:
                sys.exit(f"error: {gate} {form} twin differs from the recurrent loop (chunk {C}, L={L}): relative "
                         f"errors of y and the gradients of pq, pk, v, {', '.join(gi)} {['%.3g' % e for e in errs]} "
                         f"> 1e-10")
    print(f"{gate}: {' and '.join(forms)} twin{'s' if len(forms) > 1 else ''} = recurrent loop in f64, values and "
          f"gradients (chunk {', '.join(str(c) for c in sorted({chunk, 20}))})")


def linear_quadratic(torch, pq, pk, v, eps):
    a = torch.matmul(pq, pk.transpose(-1, -2)).tril()
    return torch.matmul(a / (a.sum(-1, keepdim=True) + eps), v)


def linear_recurrent(torch, pq, pk, v, eps):
    B, H, L, Fd = pq.shape
    S = torch.zeros(B, H, Fd, v.shape[-1], dtype=v.dtype, device=v.device)
    z = torch.zeros(B, H, Fd, 1, dtype=v.dtype, device=v.device)
    ys = []
    for t in range(L):
        qt, kt, vt = pq[:, :, t:t + 1], pk[:, :, t:t + 1], v[:, :, t:t + 1]
        S = S + torch.matmul(kt.transpose(-1, -2), vt)
        z = z + kt.transpose(-1, -2)
        ys.append(torch.matmul(qt, S) / (torch.matmul(qt, z) + eps))
    return torch.cat(ys, 2)


# ---------------------------------------------------------------- driver

def skip_reason(args, H, Fd, name, form, L, gate="none"):
    if name.startswith("hybrid-") and form == "recurrent":
        return "a hybrid's recurrent form is the decoding step, not a training form"
    if gate == "delta" and form == "quadratic":
        return "the delta rule has no quadratic form"
    if name.endswith("taylor") and L > args.max_taylor_len:
        return f"taylor above --max-taylor-len {args.max_taylor_len}"
    if form == "quadratic" and L > args.max_quadratic_len:
        return f"quadratic above --max-quadratic-len {args.max_quadratic_len}"
    if form == "quadratic" and gate == "gla":  # (B,H,L,L,F) f32 decays
        mib = L * L * args.batch * H * Fd * 4 / MIB
        if mib > args.max_gated_quadratic_mib:
            return (f"per-channel decays (B,H,L,L,F) are ~{int(mib)} MiB > --max-gated-quadratic-mib "
                    f"{args.max_gated_quadratic_mib:g}")
    if form == "recurrent" and L > args.max_recurrent_len:
        return f"recurrent above --max-recurrent-len {args.max_recurrent_len}"
    if form == "recurrent":  # the backward keeps one (B,H,F,D) state per token
        mib = L * args.batch * H * Fd * args.head_dim * 4 / MIB
        if mib > args.max_recurrent_mib:
            return f"recurrent backward keeps ~{int(mib)} MiB of states > --max-recurrent-mib {args.max_recurrent_mib:g}"
    return None


def label(name, gate):
    """A row's map name: "<map>+<gate>" when gated."""
    return name if gate == "none" else f"{name}+{gate}"


def map_gates(name, gates):
    """Every --gate for a pure linear map; softmax and hybrids run ungated."""
    return ["none"] if name == "softmax" or name.startswith("hybrid-") else gates


def run_case(torch, args, device, H, name, form, L, fmap, gate="none"):
    F = torch.nn.functional
    phi, Fd, params = fmap if fmap else (None, args.head_dim, [])
    hybrid = name.startswith("hybrid-")
    row = {"map": label(name, gate), "form": form, "L": L, "F": Fd, "status": "ok"}
    if gate != "none":
        row["gate"] = gate
    reason = skip_reason(args, H, Fd, name, form, L, gate)
    if reason:
        row.update(status="skip", reason=reason)
        return row
    g = torch.Generator(device=device).manual_seed(1234 + L)
    shape = (args.batch, H, L, args.head_dim)
    q, k, v = (torch.randn(shape, generator=g, device=device).requires_grad_() for _ in range(3))
    dy = torch.randn(shape, generator=g, device=device)
    gi = make_gate_inputs(torch, gate, args.batch, H, L, Fd, g, device) if gate != "none" else {}
    params = params + [t for t in gi.values() if t.requires_grad]

    def forward():
        if form == "softmax" and args.softmax == "math":
            s = torch.matmul(q, k.transpose(-1, -2)) * (args.head_dim ** -0.5)
            s = s.masked_fill(torch.ones(L, L, dtype=torch.bool, device=device).triu(1), float("-inf"))
            return torch.matmul(torch.softmax(s, -1), v)
        if form == "softmax":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        pq, pk = phi(q, True), phi(k, False)
        if gate != "none":
            return gated_forward(torch, gate, form, pq, pk, v, gi, args.chunk, EPS)
        if hybrid:  # params[-1]: the window factor p (H)
            wf, lf = torch.sigmoid(params[-1]), torch.ones(H, device=device)
            if form == "chunked":
                return hybrid_chunked(torch, q, k, v, pq, pk, wf, lf, args.window, args.chunk)
            return hybrid_quadratic(torch, q, k, v, pq, pk, wf, lf, args.window)
        if form == "chunked":
            return linear_chunked(torch, pq, pk, v, args.chunk, EPS)
        if form == "quadratic":
            return linear_quadratic(torch, pq, pk, v, EPS)
        if form == "fla":
            return linear_fla(pq, pk, v)
        return linear_recurrent(torch, pq, pk, v, EPS)

    def drop_grads():
        for t in [q, k, v] + params:
            t.grad = None

    def fwd():
        with torch.no_grad():
            forward()

    def fwd_bwd():
        forward().backward(dy)

    fwd_ms, fwd_mib = measure(torch, device, args.reps, drop_grads, fwd)
    tr_ms, tr_mib = measure(torch, device, args.reps, drop_grads, fwd_bwd)
    drop_grads()
    tokens = args.batch * L
    row.update(fwd_ms=fwd_ms, fwd_bwd_ms=tr_ms, fwd_peak_mib=fwd_mib, fwd_bwd_peak_mib=tr_mib,
               fwd_tokens_per_s=tokens / (fwd_ms * 1e-3), fwd_bwd_tokens_per_s=tokens / (tr_ms * 1e-3))
    return row


def crossover(rows, name, form, key):
    """Smallest L from which (name, form) is faster than softmax at every longer measured L (name:
    the row's, "<map>+<gate>" when gated)."""
    soft = {r["L"]: r[key] for r in rows if r["map"] == "softmax" and r["status"] == "ok"}
    pts = sorted((r["L"], r[key] < soft[r["L"]]) for r in rows
                 if r["map"] == name and r["form"] == form and r["status"] == "ok" and r["L"] in soft)
    frm = None
    for L, faster in reversed(pts):
        if not faster:
            break
        frm = L
    return frm


def fmt_mib(x):
    return f"{x:.1f}" if x is not None else "n/a"


def print_row(r, hh, form, flush=True):
    """One table row; with --compare, hedgehog's time over this one (its chunked row for fla)."""
    head = f"{r['map']:<15} {form:<10} {r['L']:6d} {r['F']:5d} "
    if r["status"] != "ok":
        print(f"{head}{r['status']} ({r['reason']})", flush=flush)
        return
    cmp_s = ""
    if hh:
        ref = hh.get((r["map"], "chunked" if form in TWIN_FORMS else form, r["L"]))
        if ref and ref.get("status") == "ok":
            cmp_s = f" {ref['fwd_ms'] / r['fwd_ms']:7.2f}x {ref['fwd_bwd_ms'] / r['fwd_bwd_ms']:7.2f}x"
        else:
            cmp_s = f" {'n/a':>8} {'n/a':>8}"
    print(f"{head}{r['fwd_ms']:10.2f} {r['fwd_bwd_ms']:11.2f} {fmt_mib(r['fwd_peak_mib']):>9} "
          f"{fmt_mib(r['fwd_bwd_peak_mib']):>11} {r['fwd_tokens_per_s']:11.0f} "
          f"{r['fwd_bwd_tokens_per_s']:11.0f}{cmp_s}", flush=flush)


def main():
    p = Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu or cuda[:N]")
    p.add_argument("--threads", type=nonneg_int, default=0, help="CPU threads (0 = torch's default)")
    p.add_argument("--lengths", type=int_list, default=[256, 512, 1024, 2048, 4096, 8192])
    p.add_argument("--batch", type=positive_int, default=1)
    p.add_argument("--heads", type=nonneg_int, default=0, help="0 = 4 on cpu, 12 on cuda")
    p.add_argument("--head-dim", type=positive_int, default=64)
    p.add_argument("--maps", type=name_list(MAPS), default=["softmax", "hedgehog", "elu", "taylor"])
    p.add_argument("--forms", type=name_list(FORMS + TWIN_FORMS + ("softmax",)), default=list(FORMS))
    p.add_argument("--chunk", type=positive_int, default=64)
    p.add_argument("--window", type=positive_int, default=64, help="hybrid maps: the sliding window W")
    p.add_argument("--softmax", choices=("sdpa", "math"), default="sdpa",
                   help="softmax rows: F.scaled_dot_product_attention or the composed (L,L) math")
    p.add_argument("--reps", type=positive_int, default=3)
    p.add_argument("--max-quadratic-len", type=nonneg_int, default=4096)
    p.add_argument("--max-recurrent-len", type=nonneg_int, default=1024)
    p.add_argument("--max-recurrent-mib", type=float, default=2048.0)
    p.add_argument("--max-taylor-len", type=nonneg_int, default=2048)
    p.add_argument("--gate", type=gate_list, default=["none"],
                   help="gates of the linear maps' state, a comma list of none, decay, gla, delta (rows <map>+<gate>)")
    p.add_argument("--max-gated-quadratic-mib", type=float, default=512.0)
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--compare", metavar="HH_JSON", help="bench_attention --json output to compare against")
    args = p.parse_args()

    hh = load_compare(args.compare, lambda r: (r["map"], r["form"], r["L"]))
    torch, device = setup_torch(args.device, args.threads)
    H = args.heads or (12 if device.type == "cuda" else 4)
    threads = torch.get_num_threads()
    gate_text = "" if args.gate == ["none"] else ", gates " + ",".join(args.gate)
    print(f"torch {torch.__version__} attention benchmark: {device}, {threads} thread(s), B={args.batch} H={H} "
          f"D={args.head_dim}, chunk {args.chunk}, hybrid window {args.window}{gate_text}, softmax {args.softmax}, "
          f"f32, median of {args.reps} after {WARMUP} warm-up\n")
    for name in args.maps:
        if name.startswith("hybrid-"):
            check_hybrid(torch, name[len("hybrid-"):], H, args.head_dim, args.chunk, args.window)
    if any(name != "softmax" and not name.startswith("hybrid-") for name in args.maps):
        for gate in args.gate:
            if gate != "none":
                check_gated(torch, gate, H, args.chunk)
    cmp_hdr = f" {'hh/t fwd':>8} {'hh/t f+b':>8}" if hh else ""
    print(f"{'map':<15} {'form':<10} {'L':>6} {'F':>5} {'fwd ms':>10} {'fwd+bwd ms':>11} {'fwd MiB':>9} "
          f"{'f+b MiB':>11} {'fwd tok/s':>11} {'f+b tok/s':>11}{cmp_hdr}")
    rows = []
    failures = 0
    for name in args.maps:
        fmap = None if name == "softmax" else make_feature_map(torch, name.replace("hybrid-", ""), H, args.head_dim, device)
        if name.startswith("hybrid-"):  # the window factor p (H), init 0, after the map's parameters
            fmap = (fmap[0], fmap[1], fmap[2] + [torch.zeros(H, device=device, requires_grad=True)])
        forms = ["softmax"] if name == "softmax" else [f for f in args.forms if f != "softmax"]
        for gate in map_gates(name, args.gate):
            for form in forms:
                if gate != "none" and form in TWIN_FORMS:
                    continue  # fla's linear attention has no gate here
                for L in args.lengths:
                    try:
                        r = run_case(torch, args, device, H, name, form, L, fmap, gate)
                    except (RuntimeError, MemoryError) as e:
                        r = {"map": label(name, gate), "form": form, "L": L, "F": fmap[1] if fmap else args.head_dim,
                             "status": "error", "reason": str(e).splitlines()[0]}
                        failures += 1
                    rows.append(r)
                    print_row(r, hh, form, flush=True)

    cross = []
    if any(r["map"] == "softmax" and r["status"] == "ok" for r in rows) and any(r["map"] != "softmax" for r in rows):
        print("\nwhere linear attention overtakes softmax (faster at this and every longer measured L):")
        for name in args.maps:
            if name == "softmax":
                continue
            for gate in map_gates(name, args.gate):
                for form in args.forms:
                    if form == "softmax" or (gate != "none" and form in TWIN_FORMS):
                        continue
                    row_name = label(name, gate)
                    a, b = crossover(rows, row_name, form, "fwd_ms"), crossover(rows, row_name, form, "fwd_bwd_ms")
                    say = lambda L: f"L={L}" if L else "not within the measured lengths"  # noqa: E731
                    print(f"  {row_name:<15} {form:<10} fwd: {say(a):<32} fwd+bwd: {say(b)}")
                    cross.append({"map": row_name, "form": form, "fwd_L": a, "fwd_bwd_L": b})
    out = {"library": f"torch {torch.__version__}", "device": str(device), "threads": threads, "dtype": "f32",
           "benchmark": "attention", "batch": args.batch, "heads": H, "head_dim": args.head_dim,
           "chunk": args.chunk, "window": args.window, "softmax_impl": args.softmax, "reps": args.reps, "warmup": WARMUP, "results": rows, "crossover": cross}
    if args.gate != ["none"]:  # ungated runs keep their keys as before
        out["gates"] = args.gate
    if args.json:
        write_json(args.json, out)
        print(f"\nwrote {args.json}")
    if failures:
        print(f"\n{failures} case(s) failed (status \"error\" above)")
        sys.exit(1)


if __name__ == "__main__":
    main()
