#!/usr/bin/env python3
"""The LLaMA 3 reference fixture (issue 38, item 4): a tiny LLaMA 3 built as
llm.c's train_llama3.py defines it (Meta's reference model: RMSNorm, RoPE on
interleaved pairs with LLaMA 3.1's frequency scaling, grouped-query
attention, a SwiGLU MLP with c_fc2 gated through SiLU, no biases, an untied
LM head), written once with PyTorch so the C trainer can be checked against
a model it did not write. PyTorch is needed to regenerate the file only:
never by the build, the tests or CI, which read the committed file.

    python3 bench/llama3_fixture.py [tests/fixtures/llama3_tiny.bin]
    python3 bench/llama3_fixture.py --rope    # prints test_llama_kernels.c's RoPE numbers

The model is written here from the reference's definitions (same shapes,
same operations, same parameter order), not imported, so the script runs
without llm.c's tokenizer and distributed dependencies.

Layout of the fixture (little-endian; int32 and float32 throughout), three
parts one after another:

1. The model file, as train_llama3.py's write_model writes it (version 3,
   fp32): a header of 256 int32
     [0] 20240803 magic   [1] 3 version (fp32)   [2] block_size
     [3] vocab_size  [4] n_layer  [5] n_head  [6] n_kv_head  [7] n_embd
     [8] ffn_dim_multiplier (int32: write_model truncates it; 1 here, exact)
     [9] multiple_of  [10] norm_eps (int32: 1e-5 truncates to 0; the exact
     value is in part 3)  [11] rope_theta  [12] use_scaled_rope
     [13] max_gen_batch_size  [14] major version 3  [15] minor version 1
   then the parameters in write_tensors' order, fp32:
     wte (V, C); for each layer ln_1 (C); c_attn ((NH + 2 KV) hd, C), rows
     q then k then v at GQA width; c_proj (C, C); ln_2 (C); c_fc (F, C);
     c_fc2 (F, C); c_proj (C, F) -- each of these over all layers before the
     next -- then ln_f (C) and lm_head (V, C).
2. The state, as write_state writes it: a header of 256 int32 ([0] 20240803,
   [1] B, [2] T), x (B, T) int32, y (B, T) int32, logits (B, T, V) fp32,
   loss (1) fp32, then every parameter's gradient in write_tensors' order.
   x, y are the first batch of the token stream in part 3.
3. The training trailer: a header of 16 int32
     [0] 20241038 magic  [1] 1 version  [2] steps  [3] stream tokens (n)
     [4..15] zero
   then 16 float32: [0] norm_eps [1] ffn_dim_multiplier [2] rope_theta
     [3] learning rate [4] beta1 [5] beta2 [6] AdamW eps [7] weight decay
     [8..15] zero
   then the token stream (n int32) and the losses of `steps` AdamW steps
   (steps float32). Step s trains on the sequential batch s, as llm.c's
   loader reads it: x = stream[s B T : (s+1) B T], y the same shifted by
   one; its loss is the forward's before step s's update. AdamW as the
   reference configures it: decay (weight_decay) on 2-D tensors only,
   torch.optim.AdamW's defaults otherwise (eps 1e-8), no gradient clipping,
   a constant learning rate.
"""
import math
import struct
import sys

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F

MODEL_MAGIC = 20240803
MODEL_VERSION_FP32 = 3
HEADER_INTS = 256
TRAILER_MAGIC = 20241038
TRAILER_VERSION = 1
TRAILER_INTS = 16
TRAILER_FLOATS = 16

# The tiny model: L 2, C 16, 4 query heads sharing 2 KV heads (head dim 4),
# V 64, F = 48 (multiple_of 16 over int(2 * 4C / 3) = 42), T 16, B 2.
CONFIG = dict(block_size=32, vocab_size=64, n_layer=2, n_head=4, n_kv_head=2, n_embd=16,
              ffn_dim_multiplier=1.0, multiple_of=16, norm_eps=1e-5, rope_theta=500000.0,
              use_scaled_rope=True, max_gen_batch_size=4, version=(3, 1))
B, T, STEPS = 2, 16, 10
LR, BETAS, ADAM_EPS, WEIGHT_DECAY = 1e-3, (0.9, 0.95), 1e-8, 0.1
SEED = 38

# LLaMA 3.1's RoPE frequency scaling (the reference's apply_scaling constants).
SCALE_FACTOR, LOW_FREQ_FACTOR, HIGH_FREQ_FACTOR, OLD_CONTEXT = 8.0, 1.0, 4.0, 8192.0


def apply_scaling(freqs):
    low_wavelen = OLD_CONTEXT / LOW_FREQ_FACTOR
    high_wavelen = OLD_CONTEXT / HIGH_FREQ_FACTOR
    out = []
    for f in freqs.tolist():
        wavelen = 2 * math.pi / f
        if wavelen < high_wavelen:
            out.append(f)
        elif wavelen > low_wavelen:
            out.append(f / SCALE_FACTOR)
        else:
            smooth = (OLD_CONTEXT / wavelen - LOW_FREQ_FACTOR) / (HIGH_FREQ_FACTOR - LOW_FREQ_FACTOR)
            out.append((1 - smooth) * f / SCALE_FACTOR + smooth * f)
    return torch.tensor(out, dtype=freqs.dtype)


def rope_freqs(dim, theta, scaled):
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: dim // 2].float() / dim))
    return apply_scaling(freqs) if scaled else freqs


def freqs_cis_of(dim, end, theta, scaled):
    freqs = torch.outer(torch.arange(end, dtype=torch.float32), rope_freqs(dim, theta, scaled))
    return torch.polar(torch.ones_like(freqs), freqs)  # complex64


def rotate(x, freqs_cis):
    """Interleaved pairs (2i, 2i+1) as complex numbers times e^{i pos freq}."""
    xc = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    shape = [d if i in (1, xc.ndim - 1) else 1 for i, d in enumerate(xc.shape)]
    return torch.view_as_real(xc * freqs_cis.view(*shape)).flatten(3).type_as(x)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.nh, self.kv, self.hd = c["n_head"], c["n_kv_head"], c["n_embd"] // c["n_head"]
        self.c_attn = nn.Linear(c["n_embd"], (self.nh + 2 * self.kv) * self.hd, bias=False)
        self.c_proj = nn.Linear(c["n_embd"], c["n_embd"], bias=False)

    def forward(self, x, freqs_cis, mask):
        Bx, Tx, C = x.shape
        q, k, v = self.c_attn(x).split([self.nh * self.hd, self.kv * self.hd, self.kv * self.hd], dim=-1)
        q, k, v = (t.view(Bx, Tx, -1, self.hd) for t in (q, k, v))
        q, k = rotate(q, freqs_cis), rotate(k, freqs_cis)
        rep = self.nh // self.kv  # grouped-query attention: each KV head serves rep query heads
        k, v = (t.repeat_interleave(rep, dim=2) for t in (k, v))
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.hd))
        scores = scores.masked_fill(mask, torch.finfo(scores.dtype).min)
        y = F.softmax(scores.float(), dim=-1).type_as(q) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(Bx, Tx, C))


def hidden_dim_of(c):
    h = int(2 * 4 * c["n_embd"] / 3)
    if c["ffn_dim_multiplier"] is not None:
        h = int(c["ffn_dim_multiplier"] * h)
    return c["multiple_of"] * ((h + c["multiple_of"] - 1) // c["multiple_of"])


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = hidden_dim_of(c)
        self.c_fc = nn.Linear(c["n_embd"], h, bias=False)   # up
        self.c_fc2 = nn.Linear(c["n_embd"], h, bias=False)  # gate, through SiLU
        self.c_proj = nn.Linear(h, c["n_embd"], bias=False)

    def forward(self, x):
        return self.c_proj(self.c_fc(x) * F.silu(self.c_fc2(x)))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = RMSNorm(c["n_embd"], c["norm_eps"])
        self.attn = Attention(c)
        self.ln_2 = RMSNorm(c["n_embd"], c["norm_eps"])
        self.mlp = MLP(c)

    def forward(self, x, freqs_cis, mask):
        x = x + self.attn(self.ln_1(x), freqs_cis, mask)
        return x + self.mlp(self.ln_2(x))


class Llama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c["vocab_size"], c["n_embd"]),
            h=nn.ModuleList([Block(c) for _ in range(c["n_layer"])]),
            ln_f=RMSNorm(c["n_embd"], c["norm_eps"])))
        self.lm_head = nn.Linear(c["n_embd"], c["vocab_size"], bias=False)  # untied
        self.freqs_cis = freqs_cis_of(c["n_embd"] // c["n_head"], 2 * c["block_size"], c["rope_theta"],
                                      c["use_scaled_rope"])

    def forward(self, idx, targets):
        t = idx.size(1)
        x = self.transformer.wte(idx)
        mask = torch.triu(torch.ones((t, t), dtype=torch.bool), diagonal=1)
        for block in self.transformer.h:
            x = block(x, self.freqs_cis[:t], mask)
        logits = self.lm_head(self.transformer.ln_f(x)).float()
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def tensors_in_order(named, L):
    """write_tensors' order."""
    out = [named["transformer.wte.weight"]]
    for key in ("ln_1.weight", "attn.c_attn.weight", "attn.c_proj.weight", "ln_2.weight", "mlp.c_fc.weight",
                "mlp.c_fc2.weight", "mlp.c_proj.weight"):
        out += [named[f"transformer.h.{i}.{key}"] for i in range(L)]
    return out + [named["transformer.ln_f.weight"], named["lm_head.weight"]]


def f32_bytes(t):
    return t.detach().cpu().to(torch.float32).numpy().tobytes()


def model_header(c):
    h = np.zeros(HEADER_INTS, dtype=np.int32)
    h[:16] = [MODEL_MAGIC, MODEL_VERSION_FP32, c["block_size"], c["vocab_size"], c["n_layer"], c["n_head"],
              c["n_kv_head"], c["n_embd"], int(c["ffn_dim_multiplier"]), c["multiple_of"], int(c["norm_eps"]),
              int(c["rope_theta"]), int(c["use_scaled_rope"]), c["max_gen_batch_size"], *c["version"]]
    return h.tobytes()


def batch(stream, s):
    chunk = stream[s * B * T: (s + 1) * B * T + 1]
    return chunk[:-1].view(B, T), chunk[1:].view(B, T)


def state_bytes(model, x, y, logits, loss):
    h = np.zeros(HEADER_INTS, dtype=np.int32)
    h[:3] = [MODEL_MAGIC, B, T]
    named = {n: p.grad for n, p in model.named_parameters()}
    parts = [h.tobytes(), x.numpy().astype(np.int32).tobytes(), y.numpy().astype(np.int32).tobytes(),
             f32_bytes(logits), f32_bytes(loss.reshape(1))]
    return b"".join(parts + [f32_bytes(t) for t in tensors_in_order(named, CONFIG["n_layer"])])


def train_losses(model, stream):
    params = list(model.parameters())
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": WEIGHT_DECAY},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=LR, betas=BETAS, eps=ADAM_EPS)
    losses = []
    for s in range(STEPS):
        x, y = batch(stream, s)
        opt.zero_grad(set_to_none=True)
        _, loss = model(x, y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def trailer_bytes(stream, losses):
    h = np.zeros(TRAILER_INTS, dtype=np.int32)
    h[:4] = [TRAILER_MAGIC, TRAILER_VERSION, STEPS, stream.numel()]
    f = np.zeros(TRAILER_FLOATS, dtype=np.float32)
    f[:8] = [CONFIG["norm_eps"], CONFIG["ffn_dim_multiplier"], CONFIG["rope_theta"], LR, *BETAS, ADAM_EPS,
             WEIGHT_DECAY]
    return b"".join([h.tobytes(), f.tobytes(), stream.numpy().astype(np.int32).tobytes(),
                     np.array(losses, dtype=np.float32).tobytes()])


def write_fixture(path):
    torch.manual_seed(SEED)
    model = Llama(CONFIG)
    stream = torch.randint(0, CONFIG["vocab_size"], (STEPS * B * T + 1,), generator=torch.Generator().manual_seed(SEED))
    named = dict(model.named_parameters())
    weights = model_header(CONFIG) + b"".join(f32_bytes(t) for t in tensors_in_order(named, CONFIG["n_layer"]))
    x, y = batch(stream, 0)
    logits, loss = model(x, y)
    loss.backward()
    state = state_bytes(model, x, y, logits, loss)
    losses = train_losses(model, stream)
    blob = weights + state + trailer_bytes(stream, losses)
    with open(path, "wb") as f:
        f.write(blob)
    print(f"wrote {path}: {len(blob)} bytes (model {len(weights)}, state {len(state)}); loss {loss.item():.6f}; "
          f"losses {' '.join(f'{v:.4f}' for v in losses)}")


def print_rope_reference():
    """test_llama_kernels.c's scaled-RoPE numbers: x = (1, 2, ..., hd) at a
    few positions, rotated with theta 500000 and LLaMA 3.1's scaling."""
    hd, positions = 8, (0, 1, 7, 100, 5000)
    print("freqs:", ", ".join(f"{v:.9e}f" for v in rope_freqs(hd, 500000.0, True).tolist()))
    cis = freqs_cis_of(hd, max(positions) + 1, 500000.0, True)
    x = torch.arange(1, hd + 1, dtype=torch.float32).view(1, 1, 1, hd)
    for p in positions:
        out = rotate(x, cis[p:p + 1]).flatten().tolist()
        print(f"pos {p}:", ", ".join(f"{v:.9e}f" for v in out))


if __name__ == "__main__":
    if "--rope" in sys.argv[1:]:
        print_rope_reference()
    else:
        write_fixture(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/llama3_tiny.bin")
