"""Die with the parent, then exec a command (run as ``python -S _pdeathsig_exec.py``).

``_pdeathsig_exec.py PARENT_PID -- CMD ARGS...`` sets ``PR_SET_PDEATHSIG`` to
SIGKILL (Linux; kept across exec) so that the command is killed when the thread
that started it ends, e.g. when the Ray actor that owns a ``farm serve`` is killed
or its node dies; exits at once if ``PARENT_PID`` is already gone. Only the
standard library, no site: it starts in ~15 ms.
"""

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> None:
    parent, sep, *cmd = argv
    if sep != "--" or not cmd:
        sys.exit("usage: _pdeathsig_exec.py PARENT_PID -- CMD ARGS...")
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            sys.exit(f"prctl(PR_SET_PDEATHSIG) failed: errno {ctypes.get_errno()}")
    if os.getppid() != int(parent):  # the parent died before prctl took effect
        sys.exit(1)
    os.execv(cmd[0], cmd)


if __name__ == "__main__":
    main(sys.argv[1:])
