"""The whole-run bench's corpus workloads (issue 33, item 2): programs shaped like the trust
issue's corpus, sized so that a run costs 5-20 CPU-s on one core.

* ``cnn`` -- an MNIST-style convolutional classifier on synthetic 28x28 images (each made from its
  index: every run sees the same data), a ``DataLoader`` with two worker processes that restart
  every epoch (as most training scripts leave them), Adadelta;
* ``jax`` -- a 784-512-512-10 MLP (batch 128) trained with ``jax.jit`` over ``jax.value_and_grad`` and a
  plain SGD update;
* ``ddp`` -- two ranks under ``torchrun`` (gloo on loopback), ``DistributedDataParallel`` over an
  MLP, SGD; rank 0 reports, and the job's CPU is torchrun's and both ranks'.

``build`` returns one training step, called by ``bench/whole_run.py``'s worker.
"""

from __future__ import annotations

import os
import socket

STEPS = {"cnn": 250, "jax": 600, "ddp": 300}
LABELS = {"cnn": "eager CNN with a DataLoader", "jax": "jax.jit MLP", "ddp": "2-rank DDP (torchrun, gloo)"}


def build(torch, workload: str):
    """One training step of ``workload`` (``torch`` is None for ``jax``)."""
    return {"cnn": _cnn, "jax": _jax, "ddp": _ddp}[workload](torch)


def cnn_net(torch):
    """The CNN's model class (the MNIST example's net); tests/capture/test_autograd_flops.py counts
    its flops too."""
    nn, F = torch.nn, torch.nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 16, 3, 1)
            self.conv2 = nn.Conv2d(16, 32, 3, 1)
            self.drop1, self.drop2 = nn.Dropout(0.25), nn.Dropout(0.5)
            self.fc1, self.fc2 = nn.Linear(32 * 12 * 12, 64), nn.Linear(64, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv2(F.relu(self.conv1(x)))), 2)
            x = F.relu(self.fc1(torch.flatten(self.drop1(x), 1)))
            return F.log_softmax(self.fc2(self.drop2(x)), dim=1)

    return Net


def _cnn(torch):
    F = torch.nn.functional
    torch.manual_seed(0)
    Net = cnn_net(torch)

    class Images(torch.utils.data.Dataset):
        def __len__(self):
            return 640  # 20 batches an epoch: the workers restart every 20 steps

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return torch.rand(1, 28, 28, generator=g), i % 10

    model = Net()
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)
    loader = torch.utils.data.DataLoader(Images(), batch_size=32, shuffle=True, num_workers=2)
    it = [iter(loader)]

    def step():
        try:
            x, y = next(it[0])
        except StopIteration:
            it[0] = iter(loader)
            x, y = next(it[0])
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        loss.backward()
        opt.step()
    return step


def _jax(_torch):
    import jax
    import jax.numpy as jnp

    k1, k2, k3, kx = jax.random.split(jax.random.PRNGKey(0), 4)
    params = [jax.random.normal(k, s) * 0.02 for k, s in ((k1, (784, 512)), (k2, (512, 512)), (k3, (512, 10)))]
    x = jax.random.normal(kx, (128, 784))
    y = jax.nn.one_hot(jnp.arange(128) % 10, 10)

    def loss(ps, x, y):
        h = jnp.tanh(x @ ps[0])
        h = jnp.tanh(h @ ps[1])
        return -jnp.mean(jnp.sum(jax.nn.log_softmax(h @ ps[2]) * y, axis=1))

    @jax.jit
    def update(ps, x, y):
        val, grads = jax.value_and_grad(loss)(ps, x, y)
        return [p - 0.01 * g for p, g in zip(ps, grads)], val

    state = [params]

    def step():
        state[0], val = update(state[0], x, y)
        val.block_until_ready()
    return step


def _ddp(torch):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    torch.manual_seed(0)
    nn = torch.nn
    model = DistributedDataParallel(nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                                                  nn.Linear(512, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    g = torch.Generator().manual_seed(dist.get_rank())
    x, y = torch.randn(64, 256, generator=g), torch.randint(0, 10, (64,), generator=g)

    def step():
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    return step


def ddp_finish() -> bool:
    """End the DDP worker's process group; True on the rank that reports (rank 0)."""
    import torch.distributed as dist

    rank = dist.get_rank()
    dist.barrier()
    dist.destroy_process_group()
    return rank == 0


def torchrun_argv() -> list[str]:
    """``python -m torch.distributed.run`` for 2 ranks on a free loopback port; the worker's
    ``-m bench.whole_run ...`` follows (torchrun's own ``-m``: run a module)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return ["-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
            "--master_port", str(port)]


def jax_env() -> dict[str, str]:
    """XLA on one intra-op thread, as ``OMP_NUM_THREADS=1`` keeps torch."""
    return {"XLA_FLAGS": (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false "
                          "intra_op_parallelism_threads=1").strip()}
