"""Desktop sandboxes: X11 desktops on Xvfb with real Debian apps (xterm, mousepad, galculator).

* :mod:`env_adapters.desktop.display`: Xvfb, window manager, session D-Bus, private
  home, apps, cleanup;
* :mod:`env_adapters.desktop.input`: mouse and keyboard through XTEST;
* :mod:`env_adapters.desktop.capture`: screenshots through shared memory;
* :mod:`env_adapters.desktop.a11y`: the text view (windows, each with its widgets);
* :mod:`env_adapters.desktop.atspi`: the widgets over AT-SPI (the accessibility bus);
* :mod:`env_adapters.desktop.context`: what tasks see (files, windows, clipboard, pings);
* :mod:`env_adapters.desktop.env`: :class:`DesktopEnv`, the shared GUI interface;
* :mod:`env_adapters.desktop.tasks`: the suite (env ids ``desktop/<task>``);
* :mod:`env_adapters.desktop.oracles`: scripted solutions.
"""

from env_adapters.desktop.env import DesktopEnv, DesktopTask

__all__ = ["DesktopEnv", "DesktopTask"]
