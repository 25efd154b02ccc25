"""Browser sandboxes: one headless Chromium per env, driven with Playwright.

* :mod:`env_adapters.browser.chromium`: the Chromium process, per-episode contexts,
  crash and navigation detection, screenshots;
* :mod:`env_adapters.browser.dom`: the text view (one line per visible element);
* :mod:`env_adapters.browser.env`: :class:`BrowserEnv`, the shared GUI interface
  (:mod:`env_adapters.gui`) over a page, and ``make_page_env`` for any local page;
* :mod:`env_adapters.browser.miniwob`: the MiniWoB++ suite (env ids ``miniwob/<task>``).
"""

from env_adapters.browser.env import BrowserEnv, PageTask, make_page_env

__all__ = ["BrowserEnv", "PageTask", "make_page_env"]
