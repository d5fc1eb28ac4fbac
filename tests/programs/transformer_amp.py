"""A small Transformer language model trained the way many public scripts do: AdamW with weight
decay, gradient clipping, a warm-up-then-cosine LambdaLR schedule and ``torch.autocast`` on the CPU
in bfloat16, with an ``nn.CrossEntropyLoss`` module.  Synthetic token sequences from a seeded
generator (a copy task with an offset), so the printed losses are the same on every run.

Ground truth: ``model(...)`` and ``criterion(...)`` are each one root-module execution; each
``loss.backward()`` one backward; each ``optimizer.step()`` one optimizer step.
"""
import json
import math

import torch
import torch.nn as nn

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

# the graphs the runtime should name (README: <ModuleClass>_<hash>, its _bwd, <OptimizerClass>_<hash>)
MODELS = ["TinyLM", "TinyLM_bwd", "CrossEntropyLoss", "AdamW"]


class TinyLM(nn.Module):
    def __init__(self, vocab=32, d=32, heads=2, layers=2, seq=16):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, seq, d))
        layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=64, dropout=0.1, batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab)
        mask = torch.triu(torch.full((seq, seq), float("-inf")), diagonal=1)
        self.register_buffer("mask", mask)

    def forward(self, x):
        h = self.tok(x) + self.pos[:, : x.size(1)]
        h = self.encoder(h, mask=self.mask[: x.size(1), : x.size(1)], is_causal=True)
        return self.head(self.norm(h))


def batch(g, n=8, seq=16, vocab=32):
    x = torch.randint(1, vocab, (n, seq), generator=g)
    y = torch.roll(x, shifts=1, dims=1)
    y[:, 0] = 0
    return x, y


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(42)
    model = TinyLM()
    criterion = nn.CrossEntropyLoss()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}], lr=3e-3, betas=(0.9, 0.95))
    steps, warmup = 12, 3
    sched = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / steps)))
    counts = {"forward": 0, "backward": 0, "optimizer": 0}
    for step in range(steps):
        model.train()
        x, y = batch(g)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = model(x)
            loss = criterion(logits.float().view(-1, logits.size(-1)), y.view(-1))
        counts["forward"] += 2
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        counts["backward"] += 1
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        counts["optimizer"] += 1
        sched.step()
        print(f"step {step:2d} loss {loss.item():.5f} grad_norm {norm.item():.4f} lr {sched.get_last_lr()[0]:.6f}")
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        x, y = batch(g)
        logits = model(x)
        counts["forward"] += 1
        acc = (logits.argmax(-1) == y).float().mean().item()
    print(f"eval accuracy {acc:.4f}")
    print("GROUND_TRUTH " + json.dumps({"processes": [dict(key="main", models=MODELS, **counts)]}))


if __name__ == "__main__":
    main()
