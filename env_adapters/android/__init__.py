"""Android sandboxes: an emulator (or any adb device) as a GUI sandbox, over adbutils.

* :mod:`env_adapters.android.device`: the adb server, the device (shell, exec,
  recovery), the emulator console;
* :mod:`env_adapters.android.input`: the shared actions as ``input`` commands;
* :mod:`env_adapters.android.screen`: screenshots (``screencap``, console);
* :mod:`env_adapters.android.hierarchy`: the text view from ``uiautomator dump``;
* :mod:`env_adapters.android.apps`: stock apps, the foreground activity;
* :mod:`env_adapters.android.context`: device state for tasks and checkers;
* :mod:`env_adapters.android.env`: :class:`AndroidEnv`, the shared GUI interface;
* :mod:`env_adapters.android.tasks`: the suite (env ids ``android/<task>``);
* :mod:`env_adapters.android.oracles`: scripted solutions;
* :mod:`env_adapters.android.simulator` (with :mod:`~env_adapters.android.adbwire`):
  ``AdbDeviceSimulator``, a **test double** of a device behind the real adb
  wire protocol, for machines without emulators.
"""

from env_adapters.android.env import AndroidEnv, AndroidTask

__all__ = ["AndroidEnv", "AndroidTask"]
