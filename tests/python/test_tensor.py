"""hedgehog.Tensor: numpy and DLPack round trips, views, autograd against torch, hostile input."""
import numpy as np
import pytest


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8, np.bool_])
def test_numpy_round_trip_every_dtype(hh, dtype):
    a = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    t = hh.tensor(a)
    assert t.shape == (2, 3, 4)
    b = t.numpy()
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(b, a)


def test_non_contiguous_views_are_read_by_their_strides(hh):
    a = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    for view in (a[:, ::2, 1:], a.transpose(2, 0, 1), a[::-1], a[..., 3]):
        np.testing.assert_array_equal(hh.tensor(view).numpy(), view)


def test_numpy_view_shares_memory_and_outlives_the_tensor(hh):
    t = hh.tensor(np.zeros((2, 3), dtype=np.float32))
    v = t.numpy()
    v[1, 2] = 7.0  # the same memory: the tensor sees it
    assert t.numpy()[1, 2] == 7.0
    w = np.asarray(t)
    del t  # the arrays keep the storage alive
    assert w[1, 2] == 7.0 and v.sum() == 7.0


def test_dlpack_both_ways_with_torch(hh):
    torch = pytest.importorskip("torch")
    a = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    x = torch.from_dlpack(hh.tensor(a))
    assert torch.equal(x, torch.from_numpy(a))
    back = hh.from_dlpack(torch.arange(6, dtype=torch.int64).reshape(2, 3)[:, 1:])
    np.testing.assert_array_equal(back.numpy(), np.array([[1, 2], [4, 5]]))


def test_gradients_match_torch(hh):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((1, 2, 9, 4)).astype(np.float64) for _ in range(3))
    w = rng.standard_normal((1, 2, 9, 4))
    # softmax attention (fused), then an elementwise chain and a reduction.
    hq, hk, hv = (hh.tensor(x, requires_grad=True) for x in (q, k, v))
    out = hh.softmax_attention(hq, hk, hv, causal=True)
    loss = hh.sum(hh.tanh(out) * hh.tensor(w) + hh.exp(hq) * 0.1)
    loss.backward()
    tq, tk, tv = (torch.tensor(x, requires_grad=True) for x in (q, k, v))
    tout = torch.nn.functional.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    tloss = (torch.tanh(tout) * torch.tensor(w) + torch.exp(tq) * 0.1).sum()
    tloss.backward()
    assert abs(loss.item() - tloss.item()) < 1e-10
    for mine, theirs in ((hq, tq), (hk, tk), (hv, tv)):
        np.testing.assert_allclose(mine.grad.numpy(), theirs.grad.numpy(), rtol=1e-9, atol=1e-12)


def test_linear_attention_with_a_trainable_feature_map(hh):
    rng = np.random.default_rng(2)
    phi = hh.feature_map("hedgehog", heads=2, head_dim=4)
    q = hh.tensor(rng.standard_normal((1, 2, 7, 4)).astype(np.float32), requires_grad=True)
    y = hh.linear_attention(phi(q), phi(q, is_query=False), q)
    assert y.shape == (1, 2, 7, 4)
    y.sum().backward()
    params = phi.parameters()
    assert params and all(p.grad is not None for p in params)
    assert q.grad.shape == (1, 2, 7, 4)
    with hh.no_grad():
        z = hh.linear_attention(phi(q), phi(q, is_query=False), q)
    assert not z.requires_grad


def test_hostile_input_raises(hh):
    a = hh.tensor(np.ones((3, 4), dtype=np.float32))
    with pytest.raises(hh.Error, match="cannot be multiplied"):
        hh.matmul(a, a)
    with pytest.raises(hh.Error, match="not one the engine has"):
        hh.tensor(np.ones(3, dtype=np.complex64))
    with pytest.raises(TypeError):
        a + "x"
    with pytest.raises(hh.Error):
        hh.softmax_attention(a, a, a)  # not (B,H,L,D)
    with pytest.raises(hh.Error, match="unknown"):
        hh.feature_map("nope", heads=1, head_dim=4)


def test_indexing_as_numpy_with_gradients(hh):
    a = np.arange(60, dtype=np.float64).reshape(3, 4, 5)
    t = hh.tensor(a, requires_grad=True)
    for index in (1, -1, (0, 2), slice(1, None), (slice(None), slice(1, 3)), (2, slice(0, 4, 2), -2),
                  (slice(None, None, 2), 1), slice(5, 9)):
        np.testing.assert_array_equal(t[index].numpy(), a[index])
    t[1, 1:3].sum().backward()
    expected = np.zeros_like(a)
    expected[1, 1:3] = 1
    np.testing.assert_array_equal(t.grad.numpy(), expected)
    with pytest.raises(hh.Error, match="out of range"):
        t[3]
    with pytest.raises(hh.Error, match="4 indices"):
        t[0, 0, 0, 0]
    with pytest.raises(hh.Error, match="step must be positive"):
        t[::-1]
    with pytest.raises(TypeError):
        t["x"]


def test_creation_functions(hh):
    assert hh.zeros([2, 3]).numpy().sum() == 0 and hh.zeros([2, 3]).dtype == "f32"
    np.testing.assert_array_equal(hh.ones([2], dtype="int64").numpy(), np.ones(2, dtype=np.int64))
    np.testing.assert_array_equal(hh.arange(4, dtype="i64").numpy(), np.arange(4))
    np.testing.assert_allclose(hh.arange(1, 2, 0.25).numpy(), np.arange(1, 2, 0.25))
    a, b = hh.randn([1000], seed=3), hh.randn([1000], seed=3)
    assert np.array_equal(a.numpy(), b.numpy()) and abs(a.numpy().mean()) < 0.1
    assert hh.randn([2], requires_grad=True).requires_grad
    with pytest.raises(hh.Error, match="unknown dtype"):
        hh.zeros([2], dtype="complex64")
