"""Which of this process's descendants holds the other end of a loopback connection.

A test server logs requests from several workers that send the same User-Agent from the
same address; to say which worker sent a request (two requests to a host too close
together: one worker's mistake, or two owners at once?), the server looks the client's
socket up by its port in ``/proc/net/tcp`` and finds the process holding it among its own
descendants (the workers a test starts). Linux only; None elsewhere or when not found.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator


def client_pid(connection: socket.socket) -> int | None:
    """The pid of the descendant of this process at the other end of ``connection``."""
    try:
        peer = connection.getpeername()[:2]
        ours = connection.getsockname()[:2]
    except OSError:
        return None
    inode = _inode(peer, ours)
    if inode is None:
        return None
    target = f"socket:[{inode}]"
    for pid in _descendants(os.getpid()):
        if _holds(pid, target):
            return pid
    return None


def _hex_address(address: tuple[str, int]) -> str:
    """An IPv4 address as /proc/net/tcp writes it: the address little-endian, the port."""
    packed = socket.inet_aton(address[0])
    return f"{int.from_bytes(packed, 'little'):08X}:{address[1]:04X}"


def _inode(local: tuple[str, int], remote: tuple[str, int]) -> str | None:
    """The inode of the TCP socket bound to ``local`` and connected to ``remote``."""
    want = (_hex_address(local), _hex_address(remote))
    try:
        with open("/proc/net/tcp") as table:
            next(table, None)  # the header
            for line in table:
                fields = line.split()
                if len(fields) > 9 and (fields[1], fields[2]) == want:
                    return fields[9]
    except (OSError, ValueError):
        return None
    return None


def _descendants(pid: int) -> Iterator[int]:
    """``pid``'s children, their children, and so on (from the kernel's child lists)."""
    pending = [pid]
    while pending:
        parent = pending.pop()
        for child in _children(parent):
            yield child
            pending.append(child)


def _children(pid: int) -> list[int]:
    children: list[int] = []
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return children
    for task in tasks:
        try:
            with open(f"/proc/{pid}/task/{task}/children") as listed:
                children += [int(word) for word in listed.read().split()]
        except (OSError, ValueError):
            continue
    return children


def _holds(pid: int, target: str) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                return True
        except OSError:
            continue
    return False
