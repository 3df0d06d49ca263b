"""Rehearse a two-machine ``torchrun`` job on one machine, in two Linux network namespaces.

Each "machine" is a network namespace with its own loopback and one end of a veth pair; the
two ends get addresses of a private /24 that exists only inside those namespaces, so the
workers reach each other exactly as two hosts on one switch would (through the c10d rendezvous
store on node 0 and gloo's TCP pairs), and nothing outside is ever contacted. Node 0 is
``10.<a>.<b>.1`` and node 1 ``10.<a>.<b>.2``; the subnet is derived from the process id so
that rehearsals running side by side do not meet.

Used by ``tests/test_multinode.py``, and as a script that rehearses the pretraining and
fine-tuning runs the manual describes (``docs/concepts/multi-node.md``)::

    sudo python scripts/netns_rehearsal.py check          # can this machine make namespaces?
    sudo python scripts/netns_rehearsal.py run -- muppets pretrain cfg.yaml run_dir=/shared/run

``run`` starts ``torchrun --nnodes 2 --nproc-per-node 1 --rdzv-backend c10d`` in each namespace
with the command after ``--`` (given as ``muppets …`` or ``python …``) and waits for both.

Needs root (``CAP_NET_ADMIN``) and iproute2's ``ip``; :func:`unavailable` says why not.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

RDZV_PORT = 29400


def _ip(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)


def unavailable() -> str | None:
    """Why this machine cannot make network namespaces (None: it can)."""
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed (apt-get install iproute2)"
    if os.geteuid() != 0:
        return "network namespaces need root (CAP_NET_ADMIN); run as root"
    name = f"mupchk{os.getpid()}"
    made = _ip("netns", "add", name)
    if made.returncode:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    _ip("netns", "del", name)
    return None


@dataclass(frozen=True)
class Node:
    """One rehearsed machine: its namespace, its veth end and its address."""

    rank: int
    namespace: str
    interface: str
    address: str

    def command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside this node's namespace."""
        return ["ip", "netns", "exec", self.namespace, *argv]


@dataclass(frozen=True)
class Cluster:
    """Two nodes joined by a veth pair (see :func:`two_nodes`)."""

    nodes: tuple[Node, Node]

    @property
    def endpoint(self) -> str:
        """The c10d rendezvous endpoint: node 0's address."""
        return f"{self.nodes[0].address}:{RDZV_PORT}"

    def torchrun(self, node: Node, argv: Sequence[str], *, run_id: str, max_restarts: int = 0,
                 nproc_per_node: int = 1) -> list[str]:
        """The ``torchrun`` command line for ``node`` running ``argv`` (a module after ``-m``,
        or a script path, and its arguments)."""
        return node.command([
            sys.executable, "-m", "torch.distributed.run",
            "--nnodes", str(len(self.nodes)), "--nproc-per-node", str(nproc_per_node),
            "--rdzv-backend", "c10d", "--rdzv-endpoint", self.endpoint, "--rdzv-id", run_id,
            # the endpoint is an address, which torchrun cannot match to a host name here: say
            # which agent hosts the rendezvous store (as on machines without name resolution)
            "--rdzv-conf", f"is_host={str(node.rank == 0).lower()},join_timeout=120",
            "--local-addr", node.address, "--max-restarts", str(max_restarts),
            "--monitor-interval", "0.5", *argv,
        ])

    def env(self, node: Node, base: Mapping[str, str]) -> dict[str, str]:
        """``base`` plus what tells gloo which interface is this node's network, and a
        rendezvous store per round, without which restarts can fail (pytorch/pytorch#135712;
        :func:`muppets.train.distributed.restart_warning`)."""
        return dict(base, GLOO_SOCKET_IFNAME=node.interface, TP_SOCKET_IFNAME=node.interface,
                    TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1")

    def launch(self, argv: Sequence[str], *, run_id: str, env: Mapping[str, str], cwd: Path,
               max_restarts: int = 0, logs: Path | None = None) -> list[subprocess.Popen]:
        """Start ``torchrun`` on both nodes; each node's output goes to ``logs/node<r>.log``
        (or is captured when ``logs`` is None)."""
        procs = []
        for node in self.nodes:
            out = (open(logs / f"node{node.rank}.log", "w") if logs is not None  # noqa: SIM115
                   else subprocess.PIPE)
            procs.append(subprocess.Popen(
                self.torchrun(node, argv, run_id=run_id, max_restarts=max_restarts),
                env=self.env(node, env), cwd=cwd, stdout=out, stderr=subprocess.STDOUT, text=True,
                start_new_session=True))
        return procs


    def wait(self, procs: Sequence[subprocess.Popen], timeout: float) -> list[int | None]:
        """Wait up to ``timeout`` seconds in all for the launchers; then kill whatever still
        runs in the namespaces. Their exit codes (None: killed here)."""
        deadline = time.monotonic() + timeout
        codes: list[int | None] = []
        for proc in procs:
            try:
                codes.append(proc.wait(timeout=max(0.0, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        _kill_inside([node.namespace for node in self.nodes])
        for proc in procs:
            proc.wait()
        return codes


@contextmanager
def two_nodes(tag: str | None = None) -> Iterator[Cluster]:
    """Create two namespaces joined by a veth pair for the block, and remove them after.

    Raises:
        RuntimeError: a step of the set-up failed (with ``ip``'s message).
    """
    tag = tag or str(os.getpid() % 100000)
    sub = os.getpid() % 250 + 1
    nodes = tuple(Node(r, f"mup{tag}n{r}", f"mup{tag}v{r}", f"10.213.{sub}.{r + 1}") for r in (0, 1))
    made: list[str] = []
    try:
        for node in nodes:
            _must(_ip("netns", "add", node.namespace))
            made.append(node.namespace)
        _must(_ip("link", "add", nodes[0].interface, "type", "veth", "peer", "name", nodes[1].interface))
        for node in nodes:
            _must(_ip("link", "set", node.interface, "netns", node.namespace))
            _must(_ip("-n", node.namespace, "addr", "add", f"{node.address}/24", "dev", node.interface))
            _must(_ip("-n", node.namespace, "link", "set", node.interface, "up"))
            _must(_ip("-n", node.namespace, "link", "set", "lo", "up"))
        yield Cluster(nodes)  # type: ignore[arg-type]
    finally:
        _kill_inside(made)
        for name in made:  # deleting a namespace deletes its end of the veth, and so the pair
            _ip("netns", "del", name)


def _kill_inside(namespaces: Sequence[str]) -> None:
    """SIGKILL every process of ``namespaces`` (torchrun's workers have sessions of their own,
    so killing the launchers' process groups does not reach them)."""
    for name in namespaces:
        for pid in _ip("netns", "pids", name).stdout.split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)


def _must(proc: subprocess.CompletedProcess) -> None:
    if proc.returncode:
        raise RuntimeError(f"`{' '.join(proc.args)}` failed: {proc.stderr.strip()}")


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    sub.add_parser("check", help="say whether this machine can make network namespaces")
    run = sub.add_parser("run", help="run a command as a 2-node torchrun job: run -- muppets pretrain …")
    run.add_argument("--max-restarts", type=int, default=0)
    run.add_argument("--timeout", type=float, default=3600)
    run.add_argument("--logs", type=Path, default=Path("."), help="node0.log and node1.log go here")
    run.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    reason = unavailable()
    if args.what == "check" or reason is not None:
        print(reason or "this machine can make network namespaces")
        return 0 if reason is None else 1
    command = [c for c in args.command if c != "--"]
    if not command:
        parser.error("give the command to run after --")
    head, rest = command[0], command[1:]
    target = (["-m", "muppets.cli", *rest] if head == "muppets" else
              rest if head in ("python", "python3") else command)
    args.logs.mkdir(parents=True, exist_ok=True)
    with two_nodes() as cluster:
        procs = cluster.launch(target, run_id=f"rehearsal{os.getpid()}", env=os.environ, cwd=Path.cwd(),
                               max_restarts=args.max_restarts, logs=args.logs)
        codes = cluster.wait(procs, args.timeout)
    for rank, code in enumerate(codes):
        print(f"node {rank}: {'killed after --timeout' if code is None else f'exit {code}'} "
              f"(log {args.logs / f'node{rank}.log'})")
    return 0 if codes == [0] * len(codes) else 1


if __name__ == "__main__":
    sys.exit(_main())
