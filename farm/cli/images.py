"""``farm images build [--kind toy,browser,desktop,android] [--rebuild]`` and ``farm images ls``.

The sandbox images of the docker backend (see ``sandbox_images/README.md``):

1. ``farm-base:bookworm``, made without any container registry: ``debootstrap``
   (Debian bookworm, minbase, with python3) into a directory, from the Debian
   mirror this host's apt sources name (``$FARM_DEBIAN_MIRROR`` overrides), then
   ``tar -C dir -c . | docker import - farm-base:bookworm``. Needs root.
2. ``farm-<kind>:latest`` from ``sandbox_images/<kind>/Dockerfile`` on that base
   (its ``INCLUDE <file>`` lines replaced by ``sandbox_images/<file>``: the farm
   install all kinds share; see :func:`dockerfile`): the build context holds farm's
   wheel, built from this checkout, and the wheels of its dependencies (pip on the
   host, with its own index settings), so the image installs them without reaching
   an index; the kind's Debian packages come from the mirror (``docker build
   --network host``).

``farm-android`` downloads the Android SDK at build time (``sandbox_images/android``),
so it is built only when asked for (``--kind android``) and refused at once, with
the reason, where the SDK's host cannot be reached.

An image is built when missing or stale (its ``farm.source_hash`` label differs
from this checkout's), ``--rebuild`` rebuilds it (and the base) from scratch.
Logs: ``$FARM_HOME/logs/images/<image>.log``.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from farm.errors import ConfigError

BASE_IMAGE = "farm-base:bookworm"
KINDS = ("toy", "browser", "desktop", "android")
DEFAULT_KINDS = "toy,browser,desktop"  # android downloads the Android SDK: asked for by name
EXTRAS = {"toy": "", "browser": "browser", "desktop": "desktop", "android": "android"}
#: where the android image's build downloads the SDK from (the Dockerfile's default);
#: ``$FARM_ANDROID_SDK_URL`` names another copy of the command-line tools zip
ANDROID_SDK_URL = (
    "https://dl.google.com/android/repository/commandlinetools-linux-11076708_latest.zip"
)
BASE_PACKAGES = "python3,python3-venv,ca-certificates"
PACKAGES = ("farm", "env_adapters", "orchestration", "trainer")
SUITE = "bookworm"


class ImageBuildError(ConfigError):
    """An image could not be built (the message says why and what to do)."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("images", help="build and list the docker backend's sandbox images")
    isub = p.add_subparsers(dest="images_command", metavar="SUBCOMMAND", required=True)
    b = isub.add_parser("build", help="build the base and the sandbox images (missing or stale)")
    b.add_argument(
        "--kind",
        default=DEFAULT_KINDS,
        help=f"comma-separated kinds of {','.join(KINDS)} (default: {DEFAULT_KINDS}; "
        "android needs internet access for the Android SDK)",
    )
    b.add_argument("--rebuild", action="store_true", help="rebuild from scratch, base included")
    b.set_defaults(func=run_build)
    ls = isub.add_parser("ls", help="list the sandbox images and whether they are current")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=run_ls)


# the source -------------------------------------------------------------------


def source_root() -> Path:
    """The farm checkout images are built from (it must hold pyproject.toml)."""
    root = Path(__file__).resolve().parents[2]
    if not (root / "pyproject.toml").is_file() or not (root / "sandbox_images").is_dir():
        raise ImageBuildError(
            f"farm images build needs a farm source checkout; {root} has no pyproject.toml "
            "and sandbox_images/"
        )
    return root


def _source_files(root: Path) -> list[Path]:
    files = [root / "pyproject.toml"]
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                files.append(path)
    return files


_INCLUDE = re.compile(r"^INCLUDE (\S+)\n?", re.MULTILINE)


def dockerfile(root: Path, kind: str) -> str:
    """The Dockerfile of ``kind``'s image: ``sandbox_images/<kind>/Dockerfile`` with each
    line ``INCLUDE <file>`` replaced by ``sandbox_images/<file>`` (docker has no include)."""
    images = root / "sandbox_images"
    text = (images / kind / "Dockerfile").read_text()
    return _INCLUDE.sub(lambda m: (images / m[1]).read_text(), text)


def source_hash(root: Path | None = None, kind: str | None = None) -> str:
    """A hash of what goes into an image: farm's packages, pyproject and the Dockerfile."""
    root = root or source_root()
    h = hashlib.sha256()
    for path in _source_files(root):
        h.update(str(path.relative_to(root)).encode() + b"\0")
        with contextlib.suppress(OSError):
            h.update(path.read_bytes())
    if kind:
        h.update(f"sandbox_images/{kind}/Dockerfile".encode() + b"\0")
        with contextlib.suppress(OSError):
            h.update(dockerfile(root, kind).encode())
    return h.hexdigest()[:16]


# the mirror -------------------------------------------------------------------


def apt_sources() -> list[tuple[str, list[str]]]:
    """(URI, suites) of this host's enabled apt sources (one-line and deb822 files)."""
    found: list[tuple[str, list[str]]] = []
    files = ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*"))]
    for name in files:
        try:
            text = Path(name).read_text()
        except OSError:
            continue
        if name.endswith(".list") or name == "/etc/apt/sources.list":
            for line in text.splitlines():
                m = re.match(r"^\s*deb\s+(?:\[[^\]]*\]\s+)?(\S+)\s+(\S+)", line)
                if m:
                    found.append((m.group(1), [m.group(2)]))
        elif name.endswith(".sources"):
            for stanza in re.split(r"\n\s*\n", text):
                fields: dict[str, str] = {}
                for line in stanza.splitlines():
                    if line.startswith("#") or ":" not in line:
                        continue
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
                if "deb" not in fields.get("types", "").split():
                    continue
                if fields.get("enabled", "yes").lower() == "no":
                    continue
                suites = fields.get("suites", "").split()
                for uri in fields.get("uris", "").split():
                    found.append((uri, suites))
    return found


def debian_mirrors() -> tuple[str, str | None]:
    """(the Debian mirror, the security mirror or None), from ``$FARM_DEBIAN_MIRROR``
    or this host's apt sources."""
    sources = apt_sources()
    mirror = os.environ.get("FARM_DEBIAN_MIRROR") or next(
        (uri for uri, suites in sources if SUITE in suites), None
    )
    security = next((uri for uri, suites in sources if f"{SUITE}-security" in suites), None)
    if not mirror:
        raise ImageBuildError(
            f"no Debian {SUITE} mirror in this host's apt sources (/etc/apt/sources.list, "
            "/etc/apt/sources.list.d/); set FARM_DEBIAN_MIRROR to one"
        )
    return mirror.rstrip("/"), security.rstrip("/") if security else None


# building ---------------------------------------------------------------------


class Builder:
    """Builds images with rich progress; each step's output goes to a log file."""

    def __init__(self, console: Console, log_dir: Path) -> None:
        from orchestration.backends.docker import docker_client

        self.console = console
        self.client = docker_client(timeout=600)
        self.log_dir = log_dir
        log_dir.mkdir(parents=True, exist_ok=True)
        self.root = source_root()

    def image(self, name: str) -> Any:
        import docker

        try:
            return self.client.images.get(name)
        except docker.errors.ImageNotFound:
            return None

    def build(self, kinds: list[str], rebuild: bool) -> list[tuple[str, str, float]]:
        """Build what is needed; returns (image, what happened, seconds)."""
        done: list[tuple[str, str, float]] = []
        with Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.fields[image]:<22}"),
            TextColumn("{task.description}", markup=False),
            TimeElapsedColumn(),
            console=self.console,
            transient=False,
        ) as progress:
            self.progress = progress
            if rebuild or self.image(BASE_IMAGE) is None:
                t0 = time.monotonic()
                self.build_base(progress)
                done.append((BASE_IMAGE, "built", time.monotonic() - t0))
            else:
                done.append((BASE_IMAGE, "present", 0.0))
            for kind in kinds:
                from orchestration.backends.docker import image_name

                name = image_name(kind)
                want = source_hash(self.root, kind)
                img = self.image(name)
                have = (img.labels or {}).get("farm.source_hash") if img else None
                if not rebuild and have == want:
                    done.append((name, "current", 0.0))
                    continue
                t0 = time.monotonic()
                self.build_kind(progress, kind, name, want, nocache=rebuild)
                what = "built" if img is None else ("rebuilt" if rebuild else "rebuilt (stale)")
                done.append((name, what, time.monotonic() - t0))
        with contextlib.suppress(Exception):  # the images the new tags replaced
            self.client.images.prune(filters={"dangling": True, "label": "farm.kind"})
        return done

    # the base

    def build_base(self, progress: Progress) -> None:
        if os.geteuid() != 0:
            raise ImageBuildError(
                f"building {BASE_IMAGE} runs debootstrap, which needs root: run "
                "`sudo farm images build` (or as root)"
            )
        debootstrap = shutil.which("debootstrap")
        if debootstrap is None:
            raise ImageBuildError(
                f"building {BASE_IMAGE} needs debootstrap: apt-get install debootstrap"
            )
        docker_cli = shutil.which("docker")
        if docker_cli is None:
            raise ImageBuildError(
                f"building {BASE_IMAGE} needs the docker CLI: apt-get install docker.io"
            )
        mirror, security = debian_mirrors()
        task = progress.add_task("debootstrap", image=BASE_IMAGE, total=None)
        log = self.log_dir / "farm-base.log"
        work = Path(tempfile.mkdtemp(prefix="farm-base-", dir="/var/tmp"))
        rootfs = work / "rootfs"
        try:
            self._run(
                [
                    debootstrap,
                    "--variant=minbase",
                    f"--include={BASE_PACKAGES}",
                    SUITE,
                    str(rootfs),
                    mirror,
                ],
                log,
                progress,
                task,
                f"debootstrap {SUITE} failed",
            )
            lines = [f"deb {mirror} {SUITE} main", f"deb {mirror} {SUITE}-updates main"]
            if security:
                lines.append(f"deb {security} {SUITE}-security main")
            (rootfs / "etc/apt/sources.list").write_text("\n".join(lines) + "\n")
            (rootfs / "etc/apt/apt.conf.d/90farm").write_text(
                'APT::Install-Recommends "false";\nAPT::Install-Suggests "false";\n'
                'Acquire::Languages "none";\n'
            )
            for junk in ("var/lib/apt/lists", "var/cache/apt/archives"):
                for p in (rootfs / junk).glob("*"):
                    if p.is_file():
                        p.unlink()
            progress.update(task, description="docker import")
            with open(log, "a") as out:
                tar = subprocess.Popen(
                    ["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."],
                    stdout=subprocess.PIPE,
                    stderr=out,
                )
                imp = subprocess.run(
                    [
                        docker_cli,
                        "import",
                        "--change",
                        "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                        "--change",
                        "ENV LANG=C.UTF-8",
                        "--change",
                        'CMD ["/bin/bash"]',
                        "-",
                        BASE_IMAGE,
                    ],
                    stdin=tar.stdout,
                    stdout=out,
                    stderr=out,
                    check=False,
                )
                assert tar.stdout is not None
                tar.stdout.close()
                tar.wait()
            if imp.returncode != 0 or tar.returncode != 0:
                raise ImageBuildError(f"docker import failed; see {log}:\n{_tail(log)}")
            progress.update(task, description="done")
            progress.stop_task(task)
        finally:
            _unmount_under(work)  # debootstrap mounts /proc and /sys in the target
            shutil.rmtree(work, ignore_errors=True)

    # a kind

    def build_kind(
        self, progress: Progress, kind: str, name: str, hash_: str, nocache: bool
    ) -> None:
        task = progress.add_task("preparing wheels", image=name, total=None)
        log = self.log_dir / f"farm-{kind}.log"
        log.write_text("")
        with tempfile.TemporaryDirectory(prefix=f"farm-image-{kind}-") as tmp:
            ctx = Path(tmp) / "context"
            src = Path(tmp) / "src"
            self._copy_source(src)
            deps, farm_dir = ctx / "deps", ctx / "farm"
            deps.mkdir(parents=True)
            farm_dir.mkdir()
            extras = EXTRAS[kind]
            target = f"{src}[{extras}]" if extras else str(src)
            self._run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "wheel",
                    "--disable-pip-version-check",
                    "--wheel-dir",
                    str(deps),
                    target,
                ],
                log,
                progress,
                task,
                f"pip could not prepare the wheels for {name}",
            )
            for whl in deps.glob("farm-*.whl"):
                whl.rename(farm_dir / whl.name)
            (ctx / "Dockerfile").write_text(dockerfile(self.root, kind))
            progress.update(task, description="docker build")
            self._docker_build(ctx, name, hash_, nocache, log, progress, task)
            progress.update(task, description="done")
            progress.stop_task(task)

    def _copy_source(self, dest: Path) -> None:
        dest.mkdir(parents=True)
        for name in ("pyproject.toml", "README.md", "LICENSE"):
            if (self.root / name).is_file():
                shutil.copy(self.root / name, dest / name)
        ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
        for pkg in PACKAGES:
            if (self.root / pkg).is_dir():
                shutil.copytree(self.root / pkg, dest / pkg, ignore=ignore)

    def _docker_build(
        self,
        ctx: Path,
        name: str,
        hash_: str,
        nocache: bool,
        log: Path,
        progress: Progress,
        task: Any,
    ) -> None:
        error = None
        buildargs = {"BASE": BASE_IMAGE, "FARM_SOURCE_HASH": hash_}
        if name.startswith("farm-android") and os.environ.get("FARM_ANDROID_SDK_URL"):
            buildargs["CMDLINE_TOOLS_URL"] = os.environ["FARM_ANDROID_SDK_URL"]
        with open(log, "a") as out:
            for chunk in self.client.api.build(
                path=str(ctx),
                tag=name,
                network_mode="host",
                buildargs=buildargs,
                nocache=nocache,
                rm=True,
                forcerm=True,
                decode=True,
            ):
                if "error" in chunk:
                    error = chunk.get("error", "").strip()
                    out.write(f"ERROR: {error}\n")
                    continue
                text = chunk.get("stream", "")
                if not text:
                    continue
                out.write(text)
                line = text.strip()
                if line.startswith("Step "):
                    progress.update(task, description=f"docker build: {line[:70]}")
        if error is not None:
            raise ImageBuildError(f"docker build of {name} failed: {error}\nlog: {log}")

    def _run(
        self,
        cmd: list[str],
        log: Path,
        progress: Progress,
        task: Any,
        failure: str,
    ) -> None:
        with open(log, "a") as out:
            out.write(f"$ {' '.join(cmd)}\n")
            out.flush()
            proc = subprocess.Popen(
                cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
            )
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(line)
                line = line.strip()
                if line:
                    progress.update(task, description=f"{Path(cmd[0]).name}: {line[:70]}")
            proc.wait()
        if proc.returncode != 0:
            raise ImageBuildError(f"{failure} (exit {proc.returncode}); see {log}:\n{_tail(log)}")


def _unmount_under(path: Path) -> None:
    """Lazily unmount whatever is mounted under ``path`` (deepest first)."""
    try:
        mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()]
    except OSError:
        return
    prefix = str(path) + "/"
    for mnt in sorted((m for m in mounts if m.startswith(prefix)), reverse=True):
        subprocess.run(["umount", "-l", mnt], check=False, capture_output=True)


def _tail(log: Path, lines: int = 12) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


def parse_kinds(text: str) -> list[str]:
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise ImageBuildError(
            f"unknown kind {', '.join(bad) or '(none)'}; expected some of: {', '.join(KINDS)}"
        )
    return kinds


def android_preflight(timeout_s: float = 5.0) -> None:
    """Refuse, before any work, to build farm-android where the Android SDK cannot be
    downloaded (the Dockerfile fetches it at build time)."""
    import socket
    from urllib.parse import urlsplit

    url = os.environ.get("FARM_ANDROID_SDK_URL") or ANDROID_SDK_URL
    parts = urlsplit(url)
    host, port = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except OSError as e:
        raise ImageBuildError(
            f"farm-android cannot be built here: its build downloads the Android SDK "
            f"(command-line tools from {url}, then the emulator and a system image with "
            f"sdkmanager, about 2 GB) and {host}:{port} cannot be reached "
            f"({e.strerror or e}). Build it on a machine with internet access "
            "(FARM_ANDROID_SDK_URL may name a local copy of the tools zip) and move it with "
            "`docker save farm-android:latest | docker load`."
        ) from None


def run_build(args: argparse.Namespace) -> int:
    from orchestration.spec import resolve_state_dir

    kinds = parse_kinds(args.kind)
    if "android" in kinds:
        android_preflight()  # before anything is built: the SDK must be downloadable
    console = Console(stderr=True)
    builder = Builder(console, resolve_state_dir() / "logs" / "images")
    t0 = time.monotonic()
    done = builder.build(kinds, args.rebuild)
    for name, what, secs in done:
        console.print(f"{name}: {what}" + (f" in {secs:.0f} s" if secs else ""))
    console.print(f"images ready in {time.monotonic() - t0:.0f} s")
    return 0


def image_rows() -> list[dict[str, Any]]:
    """The base and each kind's image: present, id, size, created, current."""
    import docker

    from orchestration.backends.docker import docker_client, image_name

    client = docker_client(timeout=30)
    try:
        root: Path | None = source_root()
    except ImageBuildError:
        root = None
    rows = []
    for kind, name in [("base", BASE_IMAGE)] + [(k, image_name(k)) for k in KINDS]:
        try:
            img = client.images.get(name)
        except docker.errors.ImageNotFound:
            rows.append({"image": name, "kind": kind, "present": False})
            continue
        label = (img.labels or {}).get("farm.source_hash")
        if kind == "base":
            state = "-"
        elif root is None or label is None:
            state = "unknown"
        else:
            state = "current" if label == source_hash(root, kind) else "stale"
        rows.append(
            {
                "image": name,
                "kind": kind,
                "present": True,
                "id": img.short_id.removeprefix("sha256:"),
                "size_mb": round(img.attrs.get("Size", 0) / 1e6),
                "created": img.attrs.get("Created", "")[:16].replace("T", " "),
                "source": state,
            }
        )
    return rows


def run_ls(args: argparse.Namespace) -> int:
    import json

    rows = image_rows()
    if args.json:
        print(json.dumps(rows))
        return 0
    table = Table(title="farm images")
    for column in ("image", "id", "size", "created", "source"):
        table.add_column(column, no_wrap=True)
    for r in rows:
        if not r["present"]:
            table.add_row(r["image"], "[red]missing[/red]", "", "", "")
            continue
        color = {"current": "green", "stale": "yellow"}.get(r["source"], "white")
        table.add_row(
            r["image"],
            r["id"],
            f"{r['size_mb']} MB",
            r["created"],
            f"[{color}]{escape(r['source'])}[/{color}]",
        )
    Console().print(table)
    return 0
