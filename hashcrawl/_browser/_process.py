"""The browser's process: found, started sealed over the DevTools pipe, and reaped.

Sealed means the browser has no network of its own. Where the kernel allows it, it
starts in an empty network namespace (``unshare --net`` as root, ``unshare -rn``
otherwise): it has no interface but a loopback that is down, so whatever a page tries
(WebSocket, preconnect, WebRTC) has nowhere to go, and every request that reaches the
network is one the renderer fulfilled itself. Elsewhere it gets a dead proxy with no
bypass (loopback and link-local included) and no UDP outside the proxy, which closes
what was measured (WebSocket, preconnect, STUN) but is a rule of the browser, not of the
kernel. It is driven over ``--remote-debugging-pipe`` (fds 3 and 4), so no port exists
for another process on the machine to drive it.

Reaped: the browser gets ``PR_SET_PDEATHSIG`` (SIGKILL when the worker dies, SIGKILL of
the worker included) and a process group of its own, which :meth:`BrowserProcess.aclose`
kills whole; its helpers end with it. A worker killed outright leaves its browser's
profile behind (and a browser, should the death signal ever miss): each profile is
named after its worker's pid, and the next start ends what a dead worker's profile
still holds and removes it (:func:`sweep_leftovers`).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import fcntl
import functools
import os
import re
import shutil
import signal
import subprocess
import tempfile

import trio

from hashcrawl._browser._cdp import Connection
from hashcrawl._exceptions import ConfigError

NAMES = ("chromium", "chromium-browser", "google-chrome-stable", "google-chrome")
_PR_SET_PDEATHSIG = 1
_DEAD_PROXY = "http://127.0.0.1:1"  # a privileged port nothing listens on
_DISABLED_FEATURES = (
    "Translate",
    "MediaRouter",
    "OptimizationHints",
    "InterestFeedContentSuggestions",
    "SpareRendererForSitePerProcess",
    "WebUIOmniboxPopup",
    "WebUIOmniboxAimPopup",
    "WebUIOmniboxFullPopup",
)
#: What no rendered page needs, and what would only add work, memory or leaks. For
#: memory (each seen in the PSS of the browser's processes at 4 tabs): no startup
#: window (its tab is a renderer), the network service inside the browser process (not
#: a process of its own, ~38 MiB), no spare renderer kept warm, no WebUI omnibox popup
#: preloaded (a renderer of ~60 MiB a headless browser never shows), and no back-forward
#: cache (a reused tab would keep its previous page alive for "Back").
FLAGS = (
    "--headless",
    "--remote-debugging-pipe",
    "--no-startup-window",
    "--enable-features=NetworkServiceInProcess2",
    "--disable-back-forward-cache",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--disable-sync",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-default-apps",
    "--disable-domain-reliability",
    "--disable-breakpad",
    "--metrics-recording-only",
    "--mute-audio",
    "--no-pings",
    "--deny-permission-prompts",
    "--disable-features=" + ",".join(_DISABLED_FEATURES),
)


#: A browser's profile directory, in the temporary directory: the prefix, its worker's pid.
PROFILE_PREFIX = "hashcrawl-chromium-"
_PROFILE = re.compile(re.escape(PROFILE_PREFIX) + r"([0-9]+)-[A-Za-z0-9_]+")


def sweep_leftovers(directory: str | None = None) -> list[str]:
    """End the browsers of workers that died without ending them, and remove their
    profiles: each profile in ``directory`` (the temporary directory) whose worker's pid
    is gone. A live pid's profile is left alone (a reused pid only delays its sweep).
    Returns the profiles removed."""
    directory = directory or tempfile.gettempdir()
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        found = _PROFILE.fullmatch(name)
        if found is None or _alive(int(found.group(1))):
            continue
        profile = os.path.join(directory, name)
        for pid in _using(profile):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                group = os.getpgid(pid)
                if group != os.getpgrp():  # its own group, as every browser has: end it whole
                    os.killpg(group, signal.SIGKILL)
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(profile, ignore_errors=True)
        removed.append(profile)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's: alive, and not ours to judge
    return True


def _using(profile: str) -> list[int]:
    """The pids whose command line names ``profile`` as their ``--user-data-dir``."""
    flag = f"--user-data-dir={profile}".encode()
    pids = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as cmdline:
                if flag in cmdline.read().split(b"\0"):
                    pids.append(int(entry.name))
        except OSError:
            continue
    return pids


class Seal(enum.Enum):
    """How the browser is kept off the network."""

    NAMESPACE = "an empty network namespace"
    PROXY = "a dead proxy with no bypass, and no UDP outside it"


def find_chromium(given: str | None = None) -> str:
    """The browser's executable: ``given`` (``--chromium``), else the first of
    ``NAMES`` on PATH.

    Raises:
        ConfigError: none found, or ``given`` is not an executable.
    """
    if given is not None:
        found = shutil.which(given)
        if found is None:
            raise ConfigError(f"--chromium must name an executable Chromium, not {given!r}")
        return found
    for name in NAMES:
        if (found := shutil.which(name)) is not None:
            return found
    raise ConfigError(
        "no Chromium found on PATH: install it (apt-get install chromium) or give --chromium PATH"
    )


@functools.cache
def available_seal() -> Seal:
    """The namespace where ``unshare`` can make one here, else the proxy."""
    if shutil.which("unshare") is None:
        return Seal.PROXY
    try:
        done = subprocess.run([*_unshare(), "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return Seal.PROXY
    return Seal.NAMESPACE if done.returncode == 0 else Seal.PROXY


def _unshare() -> list[str]:
    if os.geteuid() == 0:
        return ["unshare", "--net", "--"]
    return ["unshare", "--map-root-user", "--net", "--"]


def command(chromium: str, profile: str, seal: Seal, *, heap_mib: int) -> list[str]:
    """The command line that starts the browser sealed by ``seal``."""
    args = [
        chromium,
        *FLAGS,
        f"--user-data-dir={profile}",
        f"--js-flags=--max-old-space-size={heap_mib}",
    ]
    # Always the proxy too: in the namespace it costs nothing, and it keeps the
    # browser's own rules in place should the namespace ever have a way out.
    args += [
        f"--proxy-server={_DEAD_PROXY}",
        "--proxy-bypass-list=<-loopback>",
        "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    ]
    inside_root = os.geteuid() == 0 or seal is Seal.NAMESPACE
    if inside_root:  # Chromium refuses to run as root (or mapped root) with its sandbox
        args.append("--no-sandbox")
    return [*_unshare(), *args] if seal is Seal.NAMESPACE else args


class BrowserProcess:
    """One running browser and its DevTools connection.

    Start it with :meth:`start`; run :attr:`connection`'s ``run`` in a nursery; end it
    with :meth:`aclose` (which kills its whole process group and removes its profile).
    """

    def __init__(
        self, process: subprocess.Popen[bytes], connection: Connection, profile: str
    ) -> None:
        self.process, self.connection, self.profile = process, connection, profile
        self.seal: Seal | None = None

    @classmethod
    def start(
        cls, chromium: str, *, seal: Seal | None = None, heap_mib: int = 512
    ) -> BrowserProcess:
        """Start the browser: sealed, headless, in a fresh temporary profile.

        Called from the trio thread itself (not a worker thread): the death signal is
        tied to the thread that started the child, and trio's worker threads come and go.
        """
        seal = seal or available_seal()
        sweep_leftovers()
        profile = tempfile.mkdtemp(prefix=f"{PROFILE_PREFIX}{os.getpid()}-")
        to_browser_r, to_browser_w = os.pipe()
        from_browser_r, from_browser_w = os.pipe()
        try:
            process = subprocess.Popen(
                command(chromium, profile, seal, heap_mib=heap_mib),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(3, 4),
                preexec_fn=functools.partial(_in_child, to_browser_r, from_browser_w),
            )
        except OSError as exc:
            shutil.rmtree(profile, ignore_errors=True)
            for fd in (to_browser_r, to_browser_w, from_browser_r, from_browser_w):
                os.close(fd)
            raise ConfigError(f"could not start Chromium {chromium!r}: {exc}") from None
        os.close(to_browser_r)
        os.close(from_browser_w)
        connection = Connection(
            trio.lowlevel.FdStream(to_browser_w), trio.lowlevel.FdStream(from_browser_r)
        )
        browser = cls(process, connection, profile)
        browser.seal = seal
        return browser

    @property
    def alive(self) -> bool:
        """Whether the browser runs and its pipe is open."""
        return self.connection.closed is None and self.process.poll() is None

    @property
    def pid(self) -> int:
        return self.process.pid

    async def aclose(self) -> None:
        """Kill the browser's process group, wait for it, remove its profile."""
        with trio.CancelScope(shield=True):
            await self.connection.aclose()
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            await trio.to_thread.run_sync(self.process.wait)
            await trio.to_thread.run_sync(
                functools.partial(shutil.rmtree, self.profile, ignore_errors=True)
            )


def group_pss_mib(group: int) -> float:
    """The proportional set size (PSS, MiB) of the processes in process group ``group``:
    a browser's whole tree, each shared page counted once across its processes (RSS
    summed would count it in each, several times the truth)."""
    total_kib = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and _group_of(entry.name) == group:
            total_kib += _pss_kib(entry.name)
    return total_kib / 1024


def _group_of(pid: str) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except OSError:
        return None
    return int(fields[2]) if len(fields) > 2 else None  # state, ppid, pgrp


def _pss_kib(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as rollup:
            for line in rollup:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass  # ended meanwhile, or not ours to read
    return 0


def _in_child(to_browser: int, from_browser: int) -> None:
    """In the child before exec: its own process group, SIGKILL when the worker dies,
    and the pipe's ends on fds 3 (commands in) and 4 (answers out)."""
    os.setpgid(0, 0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() == 1:  # the worker died before the line above took effect
        os._exit(1)
    high_in = fcntl.fcntl(to_browser, fcntl.F_DUPFD, 10)
    high_out = fcntl.fcntl(from_browser, fcntl.F_DUPFD, 10)
    os.dup2(high_in, 3)
    os.dup2(high_out, 4)
