"""A private network of namespaces on one bridge, and packet drops between them.

Layout, for a unique prefix ``rlcXXXX`` and a free ``10.77.N.0/24``::

    root namespace   bridge rlcXXXX     10.77.N.1   (clients, the harness)
    rlcXXXX-zk0      veth in the bridge 10.77.N.10
    rlcXXXX-b0..b2   veth in the bridge 10.77.N.20..

Drops are nftables rules in the receiving (input) and sending (output) namespaces, in a
table named after the prefix; each rule is added with ``--echo --handle`` so it can be
removed on its own when its fault heals. ``close`` deletes the namespaces (their veths and
tables go with them) and the bridge, and never raises.

Concurrency: one thread (the campaign's) calls into a ``Network``.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
from dataclasses import dataclass

_HANDLE = re.compile(r"# handle (\d+)")


class NetworkUnavailable(RuntimeError):
    """This machine does not let us build namespaces (not root, no ``ip``/``nft``...)."""


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(args, capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result


def unavailable_reason() -> str | None:
    """Why the chaos harness cannot run here, or None if it can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "nft"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (make system-deps installs nftables)"
    probe = f"rlc{secrets.token_hex(2)}-probe"
    result = _run("ip", "netns", "add", probe, check=False)
    if result.returncode != 0:
        return f"`ip netns add` is not permitted: {result.stderr.strip()}"
    try:
        nft = _run(
            "ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe", check=False
        )
        if nft.returncode != 0:
            return f"nftables does not work in a namespace: {nft.stderr.strip()}"
    finally:
        _run("ip", "netns", "del", probe, check=False)
    return None


@dataclass(frozen=True)
class Node:
    """One namespace with one address on the bridge."""

    name: str  # "zk0", "b1"
    namespace: str  # "rlc1a2b-zk0"
    address: str  # "10.77.N.10"

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.namespace]


@dataclass(frozen=True)
class Drop:
    """Packets from ``source`` to ``target`` are dropped (one direction)."""

    source: Node
    target: Node
    # (namespace, chain, handle) of each rule carrying out this drop
    rules: tuple[tuple[str, str, int], ...]


class Network:
    def __init__(self, prefix: str | None = None) -> None:
        self.prefix = prefix or f"rlc{secrets.token_hex(2)}"
        self.bridge = self.prefix
        self.subnet = _free_subnet()
        self.host_address = f"{self.subnet}.1"
        self.nodes: dict[str, Node] = {}
        self._namespaces: list[str] = []
        self._veths: list[str] = []
        self._bridge_made = False
        self._drops: list[Drop] = []

    @property
    def table(self) -> str:
        return self.prefix

    def create(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        self._bridge_made = True
        _run("ip", "addr", "add", f"{self.host_address}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")

    def add_node(self, name: str, host: int) -> Node:
        """A namespace ``PREFIX-name`` with address ``10.77.N.host``, attached to the bridge."""
        namespace = f"{self.prefix}-{name}"
        _run("ip", "netns", "add", namespace)
        self._namespaces.append(namespace)
        outside, inside = f"{self.prefix}{name}", f"{self.prefix}{name}p"
        assert len(inside) <= 15, f"interface name too long: {inside}"
        _run("ip", "link", "add", outside, "type", "veth", "peer", "name", inside)
        self._veths.append(outside)
        _run("ip", "link", "set", inside, "netns", namespace)
        _run("ip", "link", "set", outside, "master", self.bridge)
        _run("ip", "link", "set", outside, "up")
        address = f"{self.subnet}.{host}"
        ns = ["ip", "netns", "exec", namespace]
        _run(*ns, "ip", "link", "set", "lo", "up")
        _run(*ns, "ip", "addr", "add", f"{address}/24", "dev", inside)
        _run(*ns, "ip", "link", "set", inside, "up")
        for chain, hook in (("input", "input"), ("output", "output")):
            if chain == "input":
                _run(*ns, "nft", "add", "table", "inet", self.table)
            _run(
                *ns,
                "nft",
                "add",
                "chain",
                "inet",
                self.table,
                chain,
                f"{{ type filter hook {hook} priority 0 ; policy accept ; }}",
            )
        node = Node(name, namespace, address)
        self.nodes[name] = node
        return node

    # -- drops ------------------------------------------------------------------

    def drop(self, source: Node, target: Node) -> Drop:
        """Drop every packet from ``source`` to ``target`` (both namespaces filter, so a
        paused or restarted process does not matter)."""
        rules = (
            self._add_rule(target.namespace, "input", f"ip saddr {source.address} drop"),
            self._add_rule(source.namespace, "output", f"ip daddr {target.address} drop"),
        )
        drop = Drop(source, target, rules)
        self._drops.append(drop)
        return drop

    def drop_connections_to(self, source: Node, target: Node, port: int) -> list[Drop]:
        """Drop the TCP connections ``source`` opens to ``target``'s ``port``, both ways
        (its packets to the port, the answers from it), filtered in ``source``'s namespace
        only: the connections ``target`` opens to ``source`` still work."""
        drops = [
            Drop(
                source,
                target,
                (
                    self._add_rule(
                        source.namespace,
                        "output",
                        f"ip daddr {target.address} tcp dport {port} drop",
                    ),
                ),
            ),
            Drop(
                target,
                source,
                (
                    self._add_rule(
                        source.namespace,
                        "input",
                        f"ip saddr {target.address} tcp sport {port} drop",
                    ),
                ),
            ),
        ]
        self._drops.extend(drops)
        return drops

    def drop_host(self, node: Node) -> list[Drop]:
        """Drop everything between ``node`` and the root namespace (the clients), both ways;
        filtered inside ``node``'s namespace only, so the root namespace is never touched."""
        host = Node("host", "", self.host_address)
        drops = [
            Drop(
                host,
                node,
                (self._add_rule(node.namespace, "input", f"ip saddr {host.address} drop"),),
            ),
            Drop(
                node,
                host,
                (self._add_rule(node.namespace, "output", f"ip daddr {host.address} drop"),),
            ),
        ]
        self._drops.extend(drops)
        return drops

    def undrop(self, drop: Drop) -> None:
        for namespace, chain, handle in drop.rules:
            _run(
                "ip",
                "netns",
                "exec",
                namespace,
                "nft",
                "delete",
                "rule",
                "inet",
                self.table,
                chain,
                "handle",
                str(handle),
            )
        self._drops.remove(drop)

    def active_drops(self) -> list[Drop]:
        return list(self._drops)

    def _add_rule(self, namespace: str, chain: str, rule: str) -> tuple[str, str, int]:
        out = _run(
            "ip",
            "netns",
            "exec",
            namespace,
            "nft",
            "--echo",
            "--handle",
            "add",
            "rule",
            "inet",
            self.table,
            chain,
            *rule.split(),
        ).stdout
        match = _HANDLE.search(out)
        if match is None:
            raise RuntimeError(f"nft printed no handle for {rule!r} in {namespace}: {out!r}")
        return namespace, chain, int(match.group(1))

    def rules_in(self, node: Node) -> str:
        """The namespace's ruleset as nft prints it (for reports and tests)."""
        return _run(*node.exec_prefix(), "nft", "list", "table", "inet", self.table).stdout

    # -- the proxies' redirection --------------------------------------------------------

    def redirect(self, node: Node, sources: list[Node], port: int, to_port: int) -> None:
        """Connections from ``sources`` to ``node``'s ``port`` go to its ``to_port`` instead
        (DNAT in ``node``'s prerouting, so the drops still see the real addresses; its own
        connections to ``port``, a proxy's, are not redirected). Stays until ``close``."""
        _run(
            *node.exec_prefix(),
            "nft",
            "add",
            "chain",
            "inet",
            self.table,
            "prerouting",
            "{ type nat hook prerouting priority -100 ; policy accept ; }",
        )
        addresses = ", ".join(s.address for s in sources)
        self._add_rule(
            node.namespace,
            "prerouting",
            f"ip saddr {{ {addresses} }} tcp dport {port} dnat ip to {node.address}:{to_port}",
        )

    # -- teardown -----------------------------------------------------------------

    def close(self) -> list[str]:
        """Delete namespaces and bridge; return the errors met (never raises)."""
        errors = []
        for veth in reversed(self._veths):  # both ends go at once; a namespace's go lazily
            result = _run("ip", "link", "del", veth, check=False)
            if result.returncode != 0 and "Cannot find device" not in result.stderr:
                errors.append(f"ip link del {veth}: {result.stderr.strip()}")
        self._veths.clear()
        for namespace in reversed(self._namespaces):
            result = _run("ip", "netns", "del", namespace, check=False)
            if result.returncode != 0:
                errors.append(f"ip netns del {namespace}: {result.stderr.strip()}")
        self._namespaces.clear()
        self._drops.clear()
        if self._bridge_made:
            result = _run("ip", "link", "del", self.bridge, check=False)
            if result.returncode != 0:
                errors.append(f"ip link del {self.bridge}: {result.stderr.strip()}")
            self._bridge_made = False
        return errors


def _free_subnet() -> str:
    """``10.77.N`` with no address of this machine in it yet (several runs may share it)."""
    used = _run("ip", "-4", "-o", "addr", "show").stdout
    for _ in range(200):
        third = 1 + secrets.randbelow(254)
        if f" 10.77.{third}." not in used:
            return f"10.77.{third}"
    raise RuntimeError("no free 10.77.N.0/24 subnet")


def leftovers(prefix_pattern: str = "rlc") -> list[str]:
    """Namespaces and links whose name starts with ``prefix_pattern`` (for tests)."""
    names = _run("ip", "netns", "list").stdout.split()
    links = _run("ip", "-o", "link", "show").stdout
    found = [n for n in names if n.startswith(prefix_pattern)]
    for line in links.splitlines():
        parts = line.split(":")
        if len(parts) > 1:
            name = parts[1].strip().split("@")[0]
            if name.startswith(prefix_pattern):
                found.append(name)
    return found
