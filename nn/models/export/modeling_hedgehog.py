# modeling_hedgehog.py: the attention of a hedgehog-converted model for transformers.
#
# A folder written by the hedgehog engine's save_hf_model for a Llama, Mistral, Qwen2, Qwen3, GPT-2,
# BERT or ViT model whose attention was swapped for linear attention (a feature map) or, for the
# decoders, the hybrid sliding window + linear attention carries this file and, in config.json,
# "model_type": "hedgehog_llama" (hedgehog_mistral, hedgehog_qwen2, hedgehog_qwen3, hedgehog_gpt2,
# hedgehog_bert, hedgehog_vit), an "auto_map" naming the classes below and a "hedgehog" section
# (mixer, form, eps, window, feature-map settings). Then
#     transformers.AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
# (AutoModel, AutoModelForSequenceClassification for BERT, AutoModelForImageClassification for ViT)
# builds transformers' own LlamaForCausalLM (MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
# GPT2LMHeadModel, BertModel, BertForSequenceClassification, ViTModel, ViTForImageClassification)
# with only the attention replaced,
# loads model.safetensors (the feature maps under "<attention>.feature_map.") and computes the
# engine's logits. The maps and mixers follow the engine (nn/feature_maps.cpp, nn/attention.cpp,
# autograd/ops/hybrid_attention.cpp). Decoders: the quadratic masked form (exact, O(L^2) memory),
# causal, unpadded batches (attention masks with padding are refused); generation with a cache keeps
# every key and value and recomputes the new rows. Encoders (BERT, ViT): the non-causal form (or the
# quadratic one when the folder's form says so); padded keys (attention_mask 0) contribute nothing,
# as in the engine (they also take no part in the exp maps' key shift or cosformer's length).
# This file is part of the hedgehog sources (nn/models/export/); the engine embeds it and writes it
# into every converted folder it can run, so keep it self-contained (torch + transformers only).
import math

import torch
from torch import nn
from transformers.models.bert.configuration_bert import BertConfig
from transformers.models.bert.modeling_bert import BertForSequenceClassification, BertModel, BertSelfAttention
from transformers.models.gpt2.configuration_gpt2 import GPT2Config
from transformers.models.gpt2.modeling_gpt2 import GPT2Attention, GPT2LMHeadModel
from transformers.models.llama.configuration_llama import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaForCausalLM, apply_rotary_pos_emb
from transformers.models.mistral.configuration_mistral import MistralConfig
from transformers.models.mistral.modeling_mistral import MistralAttention, MistralForCausalLM
from transformers.models.qwen2.configuration_qwen2 import Qwen2Config
from transformers.models.qwen2.modeling_qwen2 import Qwen2Attention, Qwen2ForCausalLM
from transformers.models.qwen3.configuration_qwen3 import Qwen3Config
from transformers.models.qwen3.modeling_qwen3 import Qwen3Attention, Qwen3ForCausalLM
from transformers.models.vit.configuration_vit import ViTConfig
from transformers.models.vit.modeling_vit import ViTAttention, ViTForImageClassification, ViTModel

# The maps this file implements: the engine refuses to export any other (nn/models/hf_save.cpp).
FEATURE_MAPS = ("elu", "relu", "performer", "cosformer", "exp", "taylor", "t2r", "t2r-hh", "hedgehog",
                "hedgehog-exp", "hedgehog-untrained")


def _stabilizer(z, is_query, key_mask=None):
    # exp maps: a per-row max for queries, one max over all keys and features of a sequence for keys
    # (with a key mask (B,L), over the real keys only).
    if is_query:
        return z.amax(-1, keepdim=True)
    if key_mask is not None:
        z = z.masked_fill(~key_mask.view(key_mask.shape[0], 1, key_mask.shape[1], 1), -1e30)
    return z.amax(dim=(-2, -1), keepdim=True)


class FeatureMap(nn.Module):
    """phi: (B,H,L,D) -> (B,H,L,F), one of FEATURE_MAPS; parameter and buffer names as the engine's."""

    def __init__(self, name, fm, heads, head_dim):
        super().__init__()
        if name not in FEATURE_MAPS:
            raise ValueError(f"hedgehog: feature map '{name}' is not implemented here (known: {FEATURE_MAPS})")
        self.name, self.heads, self.head_dim = name, heads, head_dim
        D = head_dim
        F = int(fm.get("feature_dim", 0))
        self.temperature = float(fm.get("temperature", 1.0))
        self.joint = bool(fm.get("joint_softmax", False))
        self.untied = bool(fm.get("untied", False))
        self.cosformer_length = int(fm.get("cosformer_length", 0))
        if name == "performer":
            self.m = F if F > 0 else 256
            self.register_buffer("omega", torch.zeros(self.m, D))
            self.register_buffer("redraw_state", torch.zeros(3, dtype=torch.long))
        elif name == "taylor":
            self.packed = bool(fm.get("taylor_packed", False))
            if self.packed:
                idx = [i * D + j for i in range(D) for j in range(i, D)]
                scale = [1.0 if i == j else math.sqrt(2.0) for i in range(D) for j in range(i, D)]
                self.register_buffer("packed_index", torch.tensor(idx, dtype=torch.long))
                self.register_buffer("packed_scale", torch.tensor(scale, dtype=torch.float64))
        elif name in ("t2r", "t2r-hh", "hedgehog", "hedgehog-exp", "hedgehog-untrained"):
            self.F = F if F > 0 else D
            if name == "hedgehog-untrained":
                w = torch.zeros(heads, D, self.F)
                w[:, : min(D, self.F), : min(D, self.F)] = torch.eye(min(D, self.F))
                self.register_buffer("weight", w)
                self.register_buffer("bias", torch.zeros(heads, self.F))
                self.untied = False
            else:
                for prefix in ("q_", "k_") if self.untied else ("",):
                    self.register_parameter(prefix + "weight", nn.Parameter(torch.zeros(heads, D, self.F)))
                    self.register_parameter(prefix + "bias", nn.Parameter(torch.zeros(heads, self.F)))

    def _affine(self, x, is_query):
        p = "k_" if self.untied and not is_query else ("q_" if self.untied else "")
        w, b = getattr(self, p + "weight"), getattr(self, p + "bias")
        return torch.matmul(x, w.to(x.dtype).unsqueeze(0)) + b.to(x.dtype)[None, :, None, :]

    def forward(self, x, is_query, pos_offset=0, total_len=0, key_mask=None):
        """key_mask: (B,L) bool of the real tokens (encoders' padding) or None."""
        n = self.name
        if n == "elu":
            return nn.functional.elu(x) + 1.0
        if n == "relu":
            return torch.relu(x)
        if n == "exp":
            z = x * self.temperature
            return torch.exp(z - _stabilizer(z, is_query, key_mask))
        if n == "performer":
            xs = x * self.head_dim ** -0.25
            proj = torch.matmul(xs, self.omega.to(x.dtype).t())
            sq = 0.5 * (xs * xs).sum(-1, keepdim=True)
            out = torch.exp(proj - sq - _stabilizer(proj, is_query, key_mask))
            return out * (1.0 / math.sqrt(self.m)) + 1e-6
        if n == "cosformer":
            L = x.shape[2]
            r = torch.relu(x)
            if self.cosformer_length == 0 and key_mask is not None and pos_offset == 0:
                # padded rows: M is each row's real length, as if the row were processed alone
                Mb = key_mask.to(x.dtype).sum(1).view(-1, 1, 1, 1)
                pos = torch.arange(1, L + 1, dtype=x.dtype, device=x.device).view(1, 1, L, 1)
                ang = pos * (math.pi / 2.0) / Mb
                return torch.cat([r * torch.cos(ang), r * torch.sin(ang)], -1)
            M = self.cosformer_length if self.cosformer_length > 0 else (total_len if total_len > 0 else L)
            if pos_offset + L > M:
                raise ValueError(f"hedgehog: cosformer position {pos_offset + L} exceeds its length M={M}")
            pos = torch.arange(pos_offset + 1, pos_offset + L + 1, dtype=x.dtype, device=x.device)
            ang = (pos * (math.pi / (2.0 * M))).view(1, 1, L, 1)
            return torch.cat([r * torch.cos(ang), r * torch.sin(ang)], -1)
        if n == "taylor":
            B, H, L, D = x.shape
            one = torch.ones(B, H, L, 1, dtype=x.dtype, device=x.device)
            lin = x * (1.0 / D ** 0.25)
            xc = x * (2.0 * D) ** -0.25
            quad = (xc.unsqueeze(-1) * xc.unsqueeze(-2)).reshape(B, H, L, D * D)
            if self.packed:
                quad = quad.index_select(-1, self.packed_index.to(x.device)) * self.packed_scale.to(x.dtype)
            return torch.cat([one, lin, quad], -1)
        z = self._affine(x, is_query)
        if n in ("t2r", "t2r-hh"):
            return torch.relu(z)
        if n == "hedgehog-exp":
            both = torch.cat([z, -z], -1)
            return torch.exp(both - _stabilizer(both, is_query, key_mask))
        if self.joint:  # hedgehog, hedgehog-untrained
            return torch.softmax(torch.cat([2.0 * z, -2.0 * z], -1), -1)
        return torch.cat([torch.softmax(z, -1), torch.softmax(-z, -1)], -1)


class HybridFeatureMap(nn.Module):
    """The hybrid mixer's map: the linear part's map as child "map", per-head window factors (H)."""

    def __init__(self, name, fm, heads, head_dim):
        super().__init__()
        self.map = FeatureMap(name, fm, heads, head_dim)
        self.window_factor = nn.Parameter(torch.zeros(heads))

    def forward(self, x, is_query, pos_offset=0, total_len=0, key_mask=None):
        return self.map(x, is_query, pos_offset, total_len, key_mask)


def _section(config):
    h = getattr(config, "hedgehog", None)
    if not isinstance(h, dict) or "mixer" not in h:
        raise ValueError("hedgehog: config.json has no \"hedgehog\" section naming the mixer")
    return h


def make_feature_map(config, heads, head_dim):
    h = _section(config)
    mixer = h["mixer"]
    fm = h.get("feature_map", {})
    if mixer.startswith("hybrid-"):
        return HybridFeatureMap(mixer[len("hybrid-"):], fm, heads, head_dim)
    return FeatureMap(mixer, fm, heads, head_dim)


def _visible(Lq, Lk, device):
    # (Lq,Lk) bool: query i (at position Lk - Lq + i) sees key j <= its position.
    i = torch.arange(Lk - Lq, Lk, device=device).view(-1, 1)
    j = torch.arange(Lk, device=device).view(1, -1)
    return i, j, j <= i


def _check_mask(attention_mask, Lq, Lk, window=None):
    # transformers passes the causal mask (4D, additive or bool), or for Mistral / Qwen2 the
    # sliding-window one (the converted layers read every earlier key, as the engine's); padding
    # would change the result.
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 4 or attention_mask.shape[-1] < Lk:
        return
    m = attention_mask[..., -Lq:, :Lk]
    i, j, causal = _visible(Lq, Lk, m.device)
    blocked = (m == 0) if m.dtype == torch.bool else (m < -1.0)
    if blocked.dtype != torch.bool:
        blocked = blocked.bool()
    allowed = [~causal] + ([~(causal & (i - j < window))] if window else [])
    if not any(bool((blocked == a).all()) for a in allowed):
        raise ValueError("hedgehog: padded batches are not supported (the attention mask must be causal only)")


def hedgehog_mixer(module, q, k, v):
    """q (B,H,Lq,D), k, v (B,H,Lk,D) with Lk >= Lq (the last Lq positions) -> (B,H,Lq,Dv)."""
    h = _section(module.config)
    fmap = module.feature_map
    Lq, Lk = q.shape[2], k.shape[2]
    pq = fmap(q, True, Lk - Lq, Lk).to(q.dtype)
    pk = fmap(k, False, 0, Lk).to(q.dtype)
    i, j, vis = _visible(Lq, Lk, q.device)
    a_lin = torch.matmul(pq, pk.transpose(-1, -2))  # (B,H,Lq,Lk)
    if isinstance(fmap, HybridFeatureMap):
        W = int(h.get("window", 64))
        win = vis & (j > i - W)
        lin = j <= i - W
        sc = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(q.shape[-1]))
        sc = sc.masked_fill(~win, -1e30)
        m = sc.amax(-1, keepdim=True)
        wf = torch.sigmoid(fmap.window_factor).to(q.dtype).view(1, -1, 1, 1)
        # lf = 1, or 1 - wf with LoLCATs' affine factors (feature_map.hybrid_affine)
        lf = (1 - wf) if bool(h.get("feature_map", {}).get("hybrid_affine", False)) else 1.0
        a = torch.exp(sc - m) * win.to(q.dtype) * wf + a_lin * lin.to(q.dtype) * lf
        den = a.sum(-1, keepdim=True)
        den = den + (den == 0).to(den.dtype)
        return torch.matmul(a / den, v)
    a = a_lin * vis.to(q.dtype)
    return torch.matmul(a / (a.sum(-1, keepdim=True) + float(h.get("eps", 1e-6))), v)


def _softmax_layers(config):
    # Layers the conversion kept as softmax (config.json hedgehog.softmax_layers): they keep
    # transformers' own attention.
    return {int(i) for i in _section(config).get("softmax_layers", [])}


def _repeat_kv(t, rep):
    if rep == 1:
        return t
    B, Hkv, L, D = t.shape
    return t[:, :, None].expand(B, Hkv, rep, L, D).reshape(B, Hkv * rep, L, D)


class HedgehogLlamaConfig(LlamaConfig):
    model_type = "hedgehog_llama"


class HedgehogMistralConfig(MistralConfig):
    model_type = "hedgehog_mistral"


class HedgehogQwen2Config(Qwen2Config):
    model_type = "hedgehog_qwen2"


class HedgehogQwen3Config(Qwen3Config):
    model_type = "hedgehog_qwen3"


class HedgehogGPT2Config(GPT2Config):
    model_type = "hedgehog_gpt2"


class _HedgehogDecoderAttention:
    """The Llama-family attention (Llama, Mistral, Qwen2, Qwen3) with the engine's mixer: the stock
    projections (Qwen2's biases included), Qwen3's per-head q_norm / k_norm before RoPE, the stock
    rotary embedding (every rope_type), then the feature maps per query head."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        self.feature_map = make_feature_map(config, config.num_attention_heads, self.head_dim)

    def forward(self, hidden_states, position_embeddings=None, attention_mask=None, cache=None,
                past_key_values=None, past_key_value=None, **kwargs):
        cache = next((c for c in (cache, past_key_values, past_key_value) if c is not None), None)
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        q = self.q_proj(hidden_states).view(shape)
        k = self.k_proj(hidden_states).view(shape)
        if getattr(self, "q_norm", None) is not None:  # Qwen3
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = self.v_proj(hidden_states).view(shape).transpose(1, 2)
        cos, sin = position_embeddings
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        _check_mask(attention_mask, q.shape[2], k.shape[2], getattr(self.config, "sliding_window", None))
        rep = self.num_key_value_groups  # the maps are per query head, after repeat_kv (as the engine)
        y = hedgehog_mixer(self, q, _repeat_kv(k, rep), _repeat_kv(v, rep))
        y = y.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1).contiguous()
        return self.o_proj(y), None


class HedgehogLlamaAttention(_HedgehogDecoderAttention, LlamaAttention):
    pass


class HedgehogMistralAttention(_HedgehogDecoderAttention, MistralAttention):
    pass


class HedgehogQwen2Attention(_HedgehogDecoderAttention, Qwen2Attention):
    pass


class HedgehogQwen3Attention(_HedgehogDecoderAttention, Qwen3Attention):
    pass


def _swap_decoder_attention(model, config, attention):
    kept = _softmax_layers(config)
    for i, layer in enumerate(model.model.layers):
        if i not in kept:
            layer.self_attn = attention(config, i)
    model.post_init()


class HedgehogGPT2Attention(GPT2Attention):
    def __init__(self, config, is_cross_attention=False, layer_idx=None):
        super().__init__(config, is_cross_attention=is_cross_attention, layer_idx=layer_idx)
        self.feature_map = make_feature_map(config, self.num_heads, self.head_dim)

    def forward(self, hidden_states, cache=None, attention_mask=None, past_key_values=None, layer_past=None,
                **kwargs):
        cache = next((c for c in (cache, past_key_values, layer_past) if c is not None), None)
        q, k, v = self.c_attn(hidden_states).split(self.split_size, dim=2)
        shape = (*hidden_states.shape[:-1], -1, self.head_dim)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            c = getattr(cache, "self_attention_cache", cache)
            k, v = c.update(k, v, self.layer_idx)
        _check_mask(attention_mask, q.shape[2], k.shape[2])
        y = hedgehog_mixer(self, q, k, v)
        y = y.transpose(1, 2).reshape(*hidden_states.shape[:-1], -1).contiguous()
        return self.resid_dropout(self.c_proj(y)), None


class HedgehogLlamaForCausalLM(LlamaForCausalLM):
    config_class = HedgehogLlamaConfig

    def __init__(self, config):
        super().__init__(config)
        _swap_decoder_attention(self, config, HedgehogLlamaAttention)


class HedgehogMistralForCausalLM(MistralForCausalLM):
    config_class = HedgehogMistralConfig

    def __init__(self, config):
        super().__init__(config)
        _swap_decoder_attention(self, config, HedgehogMistralAttention)


class HedgehogQwen2ForCausalLM(Qwen2ForCausalLM):
    config_class = HedgehogQwen2Config

    def __init__(self, config):
        super().__init__(config)
        _swap_decoder_attention(self, config, HedgehogQwen2Attention)


class HedgehogQwen3ForCausalLM(Qwen3ForCausalLM):
    config_class = HedgehogQwen3Config

    def __init__(self, config):
        super().__init__(config)
        _swap_decoder_attention(self, config, HedgehogQwen3Attention)


class HedgehogGPT2LMHeadModel(GPT2LMHeadModel):
    config_class = HedgehogGPT2Config

    def __init__(self, config):
        super().__init__(config)
        if getattr(config, "add_cross_attention", False):
            raise ValueError("hedgehog: add_cross_attention is not supported")
        kept = _softmax_layers(config)
        for i, block in enumerate(self.transformer.h):
            if i not in kept:
                block.attn = HedgehogGPT2Attention(config, layer_idx=i)
        self.post_init()


# Encoders (BERT, ViT): bidirectional attention, the engine's EncoderSelfAttention.


def _encoder_feature_map(config, heads, head_dim):
    if _section(config)["mixer"].startswith("hybrid-"):
        raise ValueError("hedgehog: hybrid (sliding-window) mixers are causal only; an encoder cannot run them")
    return make_feature_map(config, heads, head_dim)


def _key_mask(attention_mask, B, L):
    """The real keys (B,L) bool of transformers' bidirectional mask (None, (B,L), or 4D additive or
    bool), or None when every key is real (then the engine runs unmasked too)."""
    if attention_mask is None:
        return None
    m = attention_mask
    if m.dim() == 2:
        keep = m != 0
    elif m.dim() == 4:
        keep = m if m.dtype == torch.bool else m > -1.0  # additive: 0 kept, a large negative dropped
        keep = keep.expand(B, keep.shape[1], keep.shape[2], L)
        if not bool((keep == keep[:, :1, :1, :]).all()):
            raise ValueError("hedgehog: an encoder takes a padding mask only (every query sees the same keys)")
        keep = keep[:, 0, 0, :]
    else:
        raise ValueError(f"hedgehog: attention mask of shape {tuple(m.shape)} is not supported")
    return None if bool(keep.all()) else keep


def hedgehog_encoder_mixer(module, q, k, v, key_mask):
    """q, k, v (B,H,L,D), key_mask (B,L) bool or None -> (B,H,L,Dv): nn/attention.cpp's
    linear_attention_noncausal (or linear_attention_quadratic when the folder's form is quadratic)."""
    h = _section(module.config)
    L = k.shape[2]
    pq = module.feature_map(q, True, 0, L, key_mask)
    pk = module.feature_map(k, False, 0, L, key_mask)
    eps = float(h.get("eps", 1e-6))
    km = None if key_mask is None else key_mask.to(pk.dtype).view(key_mask.shape[0], 1, L, 1)
    if h.get("form", "chunked") == "quadratic":
        a = torch.matmul(pq, pk.transpose(-1, -2))
        if km is not None:
            a = a * km.transpose(-1, -2)
        return torch.matmul(a / (a.sum(-1, keepdim=True) + eps), v)
    if km is not None:
        pk = pk * km
    S = torch.matmul(pk.transpose(-1, -2), v)  # (B,H,F,Dv)
    z = pk.sum(-2).unsqueeze(-1)  # (B,H,F,1)
    return torch.matmul(pq, S) / (torch.matmul(pq, z) + eps)


class HedgehogBertConfig(BertConfig):
    model_type = "hedgehog_bert"


class HedgehogViTConfig(ViTConfig):
    model_type = "hedgehog_vit"


class HedgehogBertSelfAttention(BertSelfAttention):
    def __init__(self, config, is_causal=False, layer_idx=None):
        super().__init__(config, is_causal=is_causal, layer_idx=layer_idx)
        self.feature_map = _encoder_feature_map(config, self.num_attention_heads, self.attention_head_size)

    def forward(self, hidden_states, attention_mask=None, cache=None, past_key_values=None, **kwargs):
        if cache is not None or past_key_values is not None:
            raise ValueError("hedgehog: BERT runs as an encoder only (no cache)")
        B, L = hidden_states.shape[:2]
        shape = (B, L, -1, self.attention_head_size)
        q, k, v = (p(hidden_states).view(shape).transpose(1, 2) for p in (self.query, self.key, self.value))
        y = hedgehog_encoder_mixer(self, q, k, v, _key_mask(attention_mask, B, L))
        return y.transpose(1, 2).reshape(B, L, -1).contiguous(), None


def _swap_bert_attention(model, bert, config):
    if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
        raise ValueError("hedgehog: BERT as a decoder (is_decoder, add_cross_attention) is not supported")
    kept = _softmax_layers(config)
    for i, layer in enumerate(bert.encoder.layer):
        if i not in kept:
            layer.attention.self = HedgehogBertSelfAttention(config, layer_idx=i)
    model.post_init()


class HedgehogBertModel(BertModel):
    config_class = HedgehogBertConfig

    def __init__(self, config, add_pooling_layer=True):
        super().__init__(config, add_pooling_layer=add_pooling_layer)
        _swap_bert_attention(self, self, config)


class HedgehogBertForSequenceClassification(BertForSequenceClassification):
    config_class = HedgehogBertConfig

    def __init__(self, config):
        super().__init__(config)
        _swap_bert_attention(self, self.bert, config)


class _ViTFeatureMapSlot(nn.Module):
    # The engine's folders keep ViT's original names (encoder.layer.N.attention.attention.query, ...),
    # which transformers maps onto ViTAttention (layers.N.attention.q_proj, ...); the feature map
    # stays under "attention.attention.feature_map", so it lives in a child named "attention".
    def __init__(self, feature_map):
        super().__init__()
        self.feature_map = feature_map


class HedgehogViTAttention(ViTAttention):
    def __init__(self, config):
        super().__init__(config)
        self.attention = _ViTFeatureMapSlot(_encoder_feature_map(config, self.num_attention_heads, self.head_dim))

    @property
    def feature_map(self):
        return self.attention.feature_map

    def forward(self, hidden_states, attention_mask=None, **kwargs):
        B, L = hidden_states.shape[:2]
        shape = (B, L, -1, self.head_dim)
        q, k, v = (p(hidden_states).view(shape).transpose(1, 2) for p in (self.q_proj, self.k_proj, self.v_proj))
        y = hedgehog_encoder_mixer(self, q, k, v, _key_mask(attention_mask, B, L))
        return self.o_proj(y.transpose(1, 2).reshape(B, L, -1).contiguous()), None


def _swap_vit_attention(model, vit, config):
    layers = getattr(vit, "layers", None)
    if layers is None or (len(layers) and not hasattr(layers[0].attention, "q_proj")):
        raise ValueError("hedgehog: this transformers' ViT layout is not supported (ViTModel.layers, ViTAttention.q_proj)")
    kept = _softmax_layers(config)
    for i, layer in enumerate(layers):
        if i not in kept:
            layer.attention = HedgehogViTAttention(config)
    model.post_init()


class HedgehogViTModel(ViTModel):
    config_class = HedgehogViTConfig

    def __init__(self, config, add_pooling_layer=True, use_mask_token=False):
        super().__init__(config, add_pooling_layer=add_pooling_layer, use_mask_token=use_mask_token)
        _swap_vit_attention(self, self, config)


class HedgehogViTForImageClassification(ViTForImageClassification):
    config_class = HedgehogViTConfig

    def __init__(self, config):
        super().__init__(config)
        _swap_vit_attention(self, self.vit, config)


def _register_vit_names():
    # transformers applies its checkpoint renames (ViT's old names -> ViTModel's) to its own classes
    # only: a custom root class (HedgehogViTModel) needs ViTModel's registered under its own name.
    # (HedgehogViTForImageClassification holds a stock ViTModel, which gets them.)
    try:
        from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping
    except ImportError:
        return
    names = get_checkpoint_conversion_mapping("ViTModel")
    if names:
        register_checkpoint_conversion_mapping("HedgehogViTModel", names, overwrite=True)


_register_vit_names()
