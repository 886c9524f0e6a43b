#!/usr/bin/env python3
"""The peer a user would pick instead: the same GPT-2 trained in PyTorch
eager on the CPU, for bench/run_peers.sh. Benchmarking only: PyTorch is
never a dependency of the build, the tests or CI (pip install torch).

Usage: bench/pytorch_peer.py --layers 4 --d_model 256 --heads 4 --vocab 50257
           --batch 4 --seq 64 --threads 2 --steps 20 --mode bf16|autocast|fp32
  bf16:     weights, activations and AdamW states in bf16 (model.to(bfloat16))
  autocast: fp32 weights and AdamW, the forward under torch.autocast(bf16)
  fp32:     everything fp32 (the peer of shardlab's fp32 GEMMs on a CPU
            without bf16 instructions)
Prints one line: mode, ms/step and tokens/s (mean over the steps after
--warmup), and the torch version and thread count."""
import argparse
import math
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    """Pre-LayerNorm transformer block of GPT-2: attention, then the MLP."""

    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fc_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=2)
        heads = lambda t: t.reshape(B, T, self.NH, C // self.NH).transpose(1, 2)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(nn.Module):
    def __init__(self, L, C, NH, V, T):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        self.blocks = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.lnf = nn.LayerNorm(C)

    def forward(self, idx, targets):
        T = idx.shape[1]
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()  # the tied head
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for name, default in (("layers", 4), ("d_model", 256), ("heads", 4), ("vocab", 50257), ("batch", 4),
                          ("seq", 64), ("threads", 2), ("steps", 20), ("warmup", 5)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--mode", choices=("bf16", "autocast", "fp32"), default="bf16")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(1337)
    model = GPT(a.layers, a.d_model, a.heads, a.vocab, a.seq)
    if a.mode == "bf16":
        model = model.to(torch.bfloat16)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    data = torch.randint(0, 256, (a.steps + a.warmup, a.batch, a.seq + 1))  # byte tokens, as the trainer's corpus
    times = []
    for step in range(a.steps + a.warmup):
        x, y = data[step, :, :-1], data[step, :, 1:]
        t0 = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.mode == "autocast"):
            loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= a.warmup:
            times.append(time.perf_counter() - t0)
        assert math.isfinite(loss.item())
    ms = 1e3 * sum(times) / len(times)
    print("pytorch %s: %.1f ms/step, %.0f tokens/s (torch %s, %d threads, %d steps after %d warm-up)"
          % (a.mode, ms, a.batch * a.seq / (ms / 1e3), torch.__version__, a.threads, len(times), a.warmup))


if __name__ == "__main__":
    main()
