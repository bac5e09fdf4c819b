"""Plain-PyTorch MiniVLA forward, written from timm's VisionTransformer and
Hugging Face's Qwen2 (rotate-half RoPE, repeat_interleave GQA, SDPA), used by
the crate's `matches_a_pytorch_reference_forward` test to check the candle
implementation number by number.

Usage: python torch_reference.py CHECKPOINT_DIR IMAGE_SEED IDS_JSON
Prints JSON: {"logits": first-step logits, "tokens": 7 greedy ids}.
Images are 28x28 frames made by the same formula as the Rust test (no resize).
"""

import json
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file


def frame(size, seed):
    px = torch.zeros(size, size, 3)
    for y in range(size):
        for x in range(size):
            v = (x * 7 + y * 13 + seed * 31) % 256
            px[y, x] = torch.tensor([v, 255 - v, (v * 3) % 256], dtype=torch.float32)
    return px.permute(2, 0, 1)[None] / 255.0


def vit(W, p, c, x):
    mean = torch.tensor(c["mean"])[None, :, None, None]
    std = torch.tensor(c["std"])[None, :, None, None]
    x = (x - mean) / std
    x = F.conv2d(x, W[p + "patch_embed.proj.weight"], W[p + "patch_embed.proj.bias"],
                 stride=c["patch_size"])
    x = x.flatten(2).transpose(1, 2) + W[p + "pos_embed"]
    b, n, C = x.shape
    prefix = []
    if c["class_token"]:
        prefix.append(W[p + "cls_token"].expand(b, -1, -1))
    if c["reg_tokens"]:
        prefix.append(W[p + "reg_token"].expand(b, -1, -1))
    x = torch.cat(prefix + [x], 1)
    H, eps = c["heads"], c["norm_eps"]
    for i in range(c["feature_blocks"]):
        k = f"{p}blocks.{i}."
        h = F.layer_norm(x, (C,), W[k + "norm1.weight"], W[k + "norm1.bias"], eps)
        qkv = F.linear(h, W[k + "attn.qkv.weight"], W[k + "attn.qkv.bias"])
        q, kk, v = qkv.reshape(b, -1, 3, H, C // H).permute(2, 0, 3, 1, 4).unbind(0)
        a = F.scaled_dot_product_attention(q, kk, v).transpose(1, 2).reshape(b, -1, C)
        a = F.linear(a, W[k + "attn.proj.weight"], W[k + "attn.proj.bias"])
        if c["layer_scale"]:
            a = a * W[k + "ls1.scale_factor"]
        x = x + a
        h = F.layer_norm(x, (C,), W[k + "norm2.weight"], W[k + "norm2.bias"], eps)
        h = F.linear(F.gelu(F.linear(h, W[k + "mlp.fc1.weight"], W[k + "mlp.fc1.bias"])),
                     W[k + "mlp.fc2.weight"], W[k + "mlp.fc2.bias"])
        if c["layer_scale"]:
            h = h * W[k + "ls2.scale_factor"]
        x = x + h
    return x[:, int(c["class_token"]) + c["reg_tokens"]:]


def rms(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat([-x2, x1], -1)


def qwen2_last_logits(W, c, x):
    p = "language_model.model."
    b, t, D = x.shape
    nh, nkv = c["num_attention_heads"], c["num_key_value_heads"]
    hd, eps = D // nh, c["rms_norm_eps"]
    inv = 1.0 / (c["rope_theta"] ** (torch.arange(0, hd, 2).float() / hd))
    f = torch.arange(t).float()[:, None] * inv[None]
    emb = torch.cat([f, f], -1)
    cos, sin = emb.cos(), emb.sin()
    for i in range(c["num_hidden_layers"]):
        k = f"{p}layers.{i}."
        h = rms(x, W[k + "input_layernorm.weight"], eps)
        q = F.linear(h, W[k + "self_attn.q_proj.weight"], W[k + "self_attn.q_proj.bias"])
        kk = F.linear(h, W[k + "self_attn.k_proj.weight"], W[k + "self_attn.k_proj.bias"])
        v = F.linear(h, W[k + "self_attn.v_proj.weight"], W[k + "self_attn.v_proj.bias"])
        q = q.view(b, t, nh, hd).transpose(1, 2)
        kk = kk.view(b, t, nkv, hd).transpose(1, 2)
        v = v.view(b, t, nkv, hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        kk = kk * cos + rotate_half(kk) * sin
        kk = kk.repeat_interleave(nh // nkv, 1)
        v = v.repeat_interleave(nh // nkv, 1)
        a = F.scaled_dot_product_attention(q, kk, v, is_causal=True)
        x = x + F.linear(a.transpose(1, 2).reshape(b, t, D), W[k + "self_attn.o_proj.weight"])
        h = rms(x, W[k + "post_attention_layernorm.weight"], eps)
        h = F.silu(F.linear(h, W[k + "mlp.gate_proj.weight"])) * F.linear(h, W[k + "mlp.up_proj.weight"])
        x = x + F.linear(h, W[k + "mlp.down_proj.weight"])
    x = rms(x[:, -1], W[p + "norm.weight"], eps)
    head = W.get("language_model.lm_head.weight", W[p + "embed_tokens.weight"])
    return F.linear(x, head)[0]


def main():
    d, seed, ids = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
    cfg = json.load(open(f"{d}/config.json"))
    W = {k: v.float() for k, v in load_file(f"{d}/model.safetensors").items()}
    img = frame(cfg["dino"]["image_size"], seed)
    fused = torch.cat([vit(W, "vision_backbone.featurizer.", cfg["dino"], img),
                       vit(W, "vision_backbone.fused_featurizer.", cfg["siglip"], img)], -1)

    def P(n):
        return W[f"projector.{n}.weight"], W[f"projector.{n}.bias"]

    z = F.gelu(F.linear(fused, *P("fc1")))
    z = F.gelu(F.linear(z, *P("fc2")))
    patches = F.linear(z, *P("fc3"))
    emb = W["language_model.model.embed_tokens.weight"]
    text = emb[torch.tensor(ids)][None]
    x = torch.cat([text[:, :1], patches, text[:, 1:]], 1)
    first, tokens = None, []
    with torch.no_grad():
        for _ in range(7):
            logits = qwen2_last_logits(W, cfg["llm"], x)
            first = logits if first is None else first
            tok = int(logits.argmax())
            tokens.append(tok)
            x = torch.cat([x, emb[tok][None, None]], 1)
    print(json.dumps({"logits": first.tolist(), "tokens": tokens}))


if __name__ == "__main__":
    main()
