"""A self-contained HTML viewer of one episode (``farm replay --html OUT``).

One file, no network: frames are inlined once each as PNG data URIs, CSS and
JS are inline. Every observation is a frame on the timeline; the action taken
on it is drawn over it (a marker at click coordinates, the element's box from
the text view line ``[ref] role "name" ... @(x,y,w,h)`` for element actions,
typed text and keys as a caption), with reward, flags and timing; the text
view, info and annotations open on demand.
"""

from __future__ import annotations

import base64
import html
import json
import re
from typing import Any

from farm.recording.reader import Episode
from farm.recording.replay import ReplayReport, action_text

_BOX = re.compile(r"^\[(\d+)\]\s.*@\((-?\d+),(-?\d+),(\d+),(\d+)\)\s*$")


def element_boxes(text: str) -> dict[int, tuple[int, int, int, int]]:
    """``ref -> (x, y, w, h)`` from a text view."""
    out = {}
    for line in text.splitlines():
        m = _BOX.match(line)
        if m:
            out[int(m.group(1))] = tuple(int(g) for g in m.groups()[1:])  # type: ignore[assignment]
    return out


def _parse_gui_action(action: str) -> Any:
    try:
        from env_adapters.gui.actions import parse_action
    except ImportError:  # pragma: no cover - farm without its GUI adapters
        return None
    try:
        return parse_action(action)
    except Exception:  # noqa: BLE001 - a malformed action is drawn as text only
        return None


def action_overlay(action: Any, text_view: str | None) -> tuple[str, str]:
    """SVG elements drawing ``action`` (image coordinates) and a caption."""
    if not isinstance(action, str):
        return "", ""
    a = _parse_gui_action(action)
    if a is None:
        return "", ""
    kind = type(a).__name__
    svg, caption = [], ""

    def mark(x: float, y: float, cls: str = "marker marker-click") -> None:
        svg.append(
            f'<circle class="{cls}" cx="{x}" cy="{y}" r="5"/>'
            f'<line class="{cls}" x1="{x - 8}" y1="{y}" x2="{x + 8}" y2="{y}"/>'
            f'<line class="{cls}" x1="{x}" y1="{y - 8}" x2="{x}" y2="{y + 8}"/>'
        )

    if kind in ("Click", "Move"):
        mark(a.x, a.y, "marker marker-click" if kind == "Click" else "marker marker-move")
    elif kind == "Drag":
        svg.append(
            f'<line class="marker marker-drag" x1="{a.x}" y1="{a.y}" x2="{a.to_x}" y2="{a.to_y}"/>'
        )
        mark(a.x, a.y, "marker marker-drag")
        svg.append(f'<circle class="marker marker-drag" cx="{a.to_x}" cy="{a.to_y}" r="3"/>')
    elif kind == "Scroll":
        mark(a.x, a.y, "marker marker-scroll")
        svg.append(
            f'<line class="marker marker-scroll" x1="{a.x}" y1="{a.y}" '
            f'x2="{a.x + max(-40, min(40, a.dx / 10))}" y2="{a.y + max(-40, min(40, a.dy / 10))}"/>'
        )
    elif kind in ("ClickElement", "TypeElement", "SelectElement"):
        box = element_boxes(text_view or "").get(int(a.ref))
        if box is not None:
            x, y, w, h = box
            svg.append(
                f'<rect class="marker marker-element" data-ref="{a.ref}" x="{x}" y="{y}" '
                f'width="{w}" height="{h}"/>'
            )
        else:
            caption = f"element [{a.ref}] is not in the text view"
    if kind in ("TypeText", "TypeElement"):
        caption = f"typed: {a.text!r}"
    elif kind == "SelectElement":
        caption = f"selected: {a.value!r}"
    elif kind == "Key":
        caption = f"key: {a.combo}"
    return "".join(svg), caption


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:0;background:#f4f4f6;color:#222}
header{padding:12px 20px;background:#20232a;color:#eee}
header h1{font-size:18px;margin:0 0 4px}
header .meta span{margin-right:14px}
.verdict-ok{color:#7ee787}.verdict-bad{color:#ff7b72}
#timeline{display:flex;gap:6px;overflow-x:auto;padding:10px 20px;background:#fff;
 border-bottom:1px solid #ddd}
#timeline a{display:block;text-align:center;font-size:11px;color:#333;text-decoration:none;
 border:2px solid transparent;border-radius:4px;padding:2px}
#timeline a.reward{border-color:#2da44e}#timeline a.bad{border-color:#cf222e}
#timeline img{display:block;height:56px;image-rendering:pixelated}
#timeline .nothumb{width:40px;height:40px;background:#ddd}
main{padding:10px 20px}
.step{background:#fff;border:1px solid #ddd;border-radius:6px;margin:12px 0;padding:10px;
 display:flex;gap:18px;align-items:flex-start}
.step.selected{outline:3px solid #0969da}
.view{position:relative;flex:none}
.view img{display:block;image-rendering:pixelated}
.view svg{position:absolute;left:0;top:0;width:100%;height:100%;pointer-events:none}
.marker{fill:none;stroke:#ff2d55;stroke-width:2}
.marker-element{stroke:#ff9500;stroke-width:2;fill:rgba(255,149,0,.15)}
.details{min-width:0;flex:1}
.action{font:600 14px ui-monospace,monospace;background:#eef;padding:2px 6px;border-radius:4px}
.caption{color:#8250df;margin-left:8px}
.kv span{margin-right:12px}.problem{color:#cf222e}.note{color:#9a6700}
pre{white-space:pre-wrap;word-break:break-word;background:#f6f8fa;padding:6px;
 max-height:320px;overflow:auto;font-size:12px}
"""

_JS = """
document.querySelectorAll('img[data-frame]').forEach(function(img){
  var src = FRAMES[img.dataset.frame]; if (src) img.src = src;
});
function select(i){
  document.querySelectorAll('.step.selected').forEach(function(e){e.classList.remove('selected')});
  var s = document.getElementById('step-'+i); if (s){s.classList.add('selected');
  s.scrollIntoView({block:'center'});}
}
document.querySelectorAll('#timeline a').forEach(function(a){
  a.addEventListener('click', function(ev){ev.preventDefault(); select(a.dataset.step);});
});
document.addEventListener('keydown', function(ev){
  var cur = document.querySelector('.step.selected'); var i = cur ? +cur.dataset.step : -1;
  if (ev.key === 'ArrowRight' || ev.key === 'j') select(i + 1);
  if (ev.key === 'ArrowLeft' || ev.key === 'k') select(Math.max(0, i - 1));
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _obs_summary(episode: Episode, i: int) -> str:
    obs = episode.steps[i].obs
    fields = obs.get("$dict") if isinstance(obs, dict) and "$dict" in obs else None
    if fields is None:
        return json.dumps(obs, ensure_ascii=False)[:4000]
    keep = {k: v for k, v in fields.items() if not (isinstance(v, dict) and "$frame" in v)}
    keep.pop("text", None)
    return json.dumps(keep, ensure_ascii=False, indent=1)[:4000]


def render_html(episode: Episode, report: ReplayReport | None = None, *, scale: int = 2) -> str:
    """The viewer page of ``episode`` (with ``report``'s per-step verdicts if given)."""
    m = episode.meta
    frames: dict[str, str] = {}
    for i in range(len(episode.steps)):
        for h in episode.frame_refs(i):
            if h not in frames:
                data = episode.frame_bytes(h)
                frames[h] = "data:image/png;base64," + base64.b64encode(data).decode()
    verdicts = {s.index: s for s in report.steps} if report is not None else {}
    t0 = episode.steps[0].t if episode.steps else 0.0
    out = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>episode {_e(m.episode_id)}</title><style>{_CSS}</style></head><body>",
        "<header>",
        f"<h1>{_e(m.task or m.env_id)} <small>{_e(m.episode_id)}</small></h1><div class='meta'>",
        f"<span>env <b>{_e(m.env_id)}</b></span><span>seed <b>{_e(m.seed)}</b></span>",
        f"<span>outcome <b id='outcome'>{_e(episode.outcome)}</b></span>",
        f"<span>return <b>{episode.total_reward:g}</b></span>",
        f"<span>steps <b id='num-steps'>{episode.num_steps}</b></span>",
        f"<span>recorded {_e(m.created)}</span>",
    ]
    if m.job:
        out.append(f"<span>job {_e(m.job)}</span>")
    if report is not None:
        cls = "verdict-ok" if report.reproduced else "verdict-bad"
        text = "reproduced" if report.reproduced else "NOT reproduced"
        out.append(f"<span id='verdict' class='{cls}'>replay: {text}</span>")
    out.append("</div>")
    if report is not None:
        for p in report.problems:
            out.append(f"<div class='problem'>{_e(p)}</div>")
    out.append("</header><nav id='timeline'>")
    for i, rec in enumerate(episode.steps):
        refs = episode.frame_refs(i)
        v = verdicts.get(i)
        cls = "bad" if v is not None and not v.ok else ("reward" if rec.reward > 0 else "")
        thumb = f"<img alt='' data-frame='{refs[0]}'>" if refs else "<div class='nothumb'></div>"
        out.append(f"<a href='#step-{i}' class='{cls}' data-step='{i}'>{thumb}{i}</a>")
    out.append("</nav><main>")
    for i, rec in enumerate(episode.steps):
        nxt = episode.steps[i + 1] if i + 1 < len(episode.steps) else None
        text_view = episode.obs_field(i, "text")
        action = episode.action(i + 1) if nxt is not None else None
        svg, caption = action_overlay(action, text_view) if nxt is not None else ("", "")
        refs = episode.frame_refs(i)
        out.append(f"<section class='step' id='step-{i}' data-step='{i}'>")
        if refs:
            shape = None
            obs = rec.obs.get("$dict", {}) if isinstance(rec.obs, dict) else {}
            for v in obs.values():
                if isinstance(v, dict) and v.get("$frame") == refs[0]:
                    shape = v.get("shape")
            h, w = (shape[0], shape[1]) if shape else (0, 0)
            size = f"width='{w * scale}' height='{h * scale}'" if shape else ""
            out.append(
                f"<div class='view'><img class='frame' alt='frame {i}' data-frame='{refs[0]}' "
                f"{size}><svg viewBox='0 0 {w} {h}' preserveAspectRatio='none'>{svg}</svg></div>"
            )
        out.append("<div class='details'>")
        label = "reset" if i == 0 else f"after step {i}"
        out.append(
            f"<h3>observation {i} <small>({label}, t+{rec.t - t0:.3f} s, "
            f"took {rec.duration_s * 1000:.1f} ms)</small></h3>"
        )
        if i > 0:
            out.append(
                f"<div class='kv'><span>reward <b class='reward'>{rec.reward:g}</b></span>"
                f"<span>terminated {rec.terminated}</span>"
                f"<span>truncated {rec.truncated}</span></div>"
            )
        if nxt is not None:
            out.append(
                f"<p>next action: <code class='action' data-step='{i + 1}'>"
                f"{_e(action_text(action))}</code>"
                + (f"<span class='caption'>{_e(caption)}</span>" if caption else "")
                + "</p>"
            )
        v = verdicts.get(i)
        if v is not None:
            for p in v.problems:
                out.append(f"<div class='problem'>replay: {_e(p)}</div>")
            for n in v.notes:
                out.append(f"<div class='note'>replay: {_e(n)}</div>")
        if text_view is not None:
            out.append(
                f"<details class='textview'><summary>text view</summary><pre>{_e(text_view)}</pre>"
                "</details>"
            )
        out.append(
            "<details><summary>observation</summary>"
            f"<pre>{_e(_obs_summary(episode, i))}</pre></details>"
        )
        if rec.info:
            info = json.dumps(rec.info, ensure_ascii=False, indent=1)[:4000]
            out.append(f"<details><summary>info</summary><pre>{_e(info)}</pre></details>")
        if nxt is not None and nxt.annotations:
            ann = json.dumps(nxt.annotations, ensure_ascii=False, indent=1)[:8000]
            out.append(
                f"<details class='annotations'><summary>annotations of step {i + 1}</summary>"
                f"<pre>{_e(ann)}</pre></details>"
            )
        out.append("</div></section>")
    if not episode.complete:
        out.append("<p class='problem'>the recording is incomplete (no end record)</p>")
    out.append("</main><script>")
    out.append("const FRAMES = " + json.dumps(frames) + ";")
    out.append(_JS + "</script></body></html>")
    return "\n".join(out)


def write_html(path: str, episode: Episode, report: ReplayReport | None = None) -> str:
    import os

    page = render_html(episode, report)
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(page)
    os.replace(tmp, path)
    return path
