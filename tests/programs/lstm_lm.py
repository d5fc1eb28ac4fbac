"""A word-level LSTM language model in the style of PyTorch's word_language_model example:
batchify, truncated BPTT with ``repackage_hidden``, ``clip_grad_norm_`` and a hand-written SGD
update (``p.data.add_(p.grad, alpha=-lr)``): no optimizer object.  The corpus is a deterministic
token stream with some structure, so the printed losses are the same on every run.

Ground truth: ``model(...)`` and the ``criterion(...)`` module (an ``nn.NLLLoss`` called on its
own) are each one root-module execution; each ``loss.backward()`` is one backward.
"""
import json
import math

import torch
import torch.nn as nn

torch.use_deterministic_algorithms(True)
torch.set_num_threads(1)

# the graphs the runtime should name (README: <ModuleClass>_<hash>, its _bwd, <OptimizerClass>_<hash>)
MODELS = ["RNNModel", "RNNModel_bwd", "NLLLoss"]


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.2):
        super().__init__()
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nlayers, self.nhid = nlayers, nhid
        nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -0.1, 0.1)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.decoder.out_features)
        return torch.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        w = next(self.parameters())
        return (w.new_zeros(self.nlayers, bsz, self.nhid), w.new_zeros(self.nlayers, bsz, self.nhid))


def corpus(n, ntoken, seed):
    """Tokens where each one mostly follows from the previous one (a noisy cycle)."""
    g = torch.Generator().manual_seed(seed)
    noise = torch.randint(0, ntoken, (n,), generator=g)
    keep = torch.rand(n, generator=g) < 0.7
    out = torch.empty(n, dtype=torch.long)
    prev = 0
    for i in range(n):
        prev = (prev + 3) % ntoken if keep[i] else int(noise[i])
        out[i] = prev
    return out


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    return data.narrow(0, 0, nbatch * bsz).view(bsz, -1).t().contiguous()


def repackage_hidden(h):
    return h.detach() if isinstance(h, torch.Tensor) else tuple(repackage_hidden(v) for v in h)


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)


def main():
    torch.manual_seed(1111)
    ntoken, bptt, lr, clip = 40, 8, 2.0, 0.25
    train_data = batchify(corpus(800, ntoken, 1), 8)
    val_data = batchify(corpus(200, ntoken, 2), 4)
    model = RNNModel(ntoken, 16, 32, 2)
    criterion = nn.NLLLoss()
    counts = {"forward": 0, "backward": 0}

    def evaluate(source):
        model.eval()
        total = 0.0
        hidden = model.init_hidden(4)
        with torch.no_grad():
            for i in range(0, source.size(0) - 1, bptt):
                data, targets = get_batch(source, i, bptt)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total += len(data) * criterion(output, targets).item()
                counts["forward"] += 2
        return total / (len(source) - 1)

    for epoch in range(1, 3):
        model.train()
        hidden = model.init_hidden(8)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
            data, targets = get_batch(train_data, i, bptt)
            model.zero_grad()
            hidden = repackage_hidden(hidden)
            output, hidden = model(data, hidden)
            loss = criterion(output, targets)
            counts["forward"] += 2
            loss.backward()
            counts["backward"] += 1
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            if batch % 4 == 0:
                print(f"| epoch {epoch:3d} | batch {batch:3d} | lr {lr:.2f} | loss {loss.item():.6f}")
        val_loss = evaluate(val_data)
        print(f"| end of epoch {epoch:3d} | valid loss {val_loss:.6f} | valid ppl {math.exp(val_loss):.4f}")
        lr /= 4.0
    print("GROUND_TRUTH " + json.dumps({"processes": [dict(key="main", models=MODELS, **counts)]}))


if __name__ == "__main__":
    main()
