"""The text view of a page, and the in-page helpers of element actions.

The text view is one line per visible element, in document order::

    [ref] role "name" value="..." options=[...] focused disabled class="..." @(x,y,w,h)

for example::

    [3] textbox "Name" value="Ada" focused @(50,81,177,21)
    [4] checkbox "I agree" value="unchecked" @(235,83,13,13)
    [5] combobox "" value="Red" options=["Red","Blue"] @(303,82,60,19)
    [7] button "Submit" @(2,158,95,31)
    [9] span "" class="star" @(118,80,12,12)

* ``ref``: a stable integer id, stored on the element as ``data-farm-ref``; an
  element keeps its ref for the whole episode (page); new elements get new refs.
  ``click_element(ref)``, ``type_element(ref, text)`` and
  ``select_element(ref, value)`` take it.
* ``role``: the ARIA role (``role=`` attribute, except ``presentation``/``none``),
  else the tag's implicit role (``button``, ``link`` for ``a[href]``,
  ``textbox``, ``checkbox``, ``radio``, ``combobox``, ``listbox``, ``slider``,
  ``spinbutton``, ``heading``, ``img``, ``listitem``, ``cell``, ``label``...),
  else the tag name (``div``, ``span``, ``p``, ``svg``, ``circle``, ``text``...).
* ``name`` (a JSON string): ``aria-label``, ``aria-labelledby``, the control's
  ``<label>``, ``placeholder``, ``title`` or ``alt``; else, for buttons, links,
  tabs, options, headings, labels, cells, list items (roles that take their name
  from their content), the whole text content when it is short (their
  descendants then get no line of their own unless they are interactive); else
  the element's text as it reads: its own text and that of inline descendants
  (``<b>``, ``<span>``...; these still get their own lines, so inline targets
  such as MiniWoB's link spans can be clicked).
* ``value`` (JSON string), only for elements that have one: text inputs and
  textareas (their text), checkboxes and radios (``"checked"``/``"unchecked"``,
  also ``aria-checked``), selects (the selected option, plus ``options=[...]``),
  ``aria-valuenow``, contenteditable hosts.
* flags ``focused`` and ``disabled`` when they apply; ``class="..."`` only for
  nameless elements (an icon's class is often all that tells it apart).
* ``@(x,y,w,h)``: the bounding box in screenshot pixels, rounded.

Listed: interactive elements (links, buttons, form controls, ARIA widgets,
``contenteditable``, ``tabindex >= 0``, ``onclick``), elements with a name,
images, canvases and SVG shapes, and nameless leaf elements that have a class.
Skipped: invisible elements (``display: none``, ``visibility: hidden``,
``opacity: 0``, zero size), elements entirely outside the observed area,
labels of listed controls (their text names the control), and elements
matching the task's ``exclude`` selector. Names are clipped to
:data:`NAME_LIMIT` characters; after :data:`MAX_LINES` lines one last line
says how many more elements there were. The walk is one pass over the DOM
(shadow roots included, iframes not): a few milliseconds on MiniWoB pages.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

#: characters of a name or value in the text view (longer ones end with "...")
NAME_LIMIT = 100
#: lines of the text view (one more line counts the rest)
MAX_LINES = 1000

TEXT_VIEW_JS = r"""
(opts) => {
  const W = opts.width, H = opts.height, MAXL = opts.maxLines, LIM = opts.nameLimit;
  let exclude = opts.exclude || null;
  try { if (exclude) document.querySelector(exclude); } catch (e) { exclude = null; }  // invalid
  const SKIP = new Set(['SCRIPT', 'STYLE', 'HEAD', 'META', 'TITLE', 'NOSCRIPT', 'TEMPLATE',
    'BR', 'LINK', 'WBR', 'OPTION', 'OPTGROUP', 'DATALIST', 'PARAM', 'SOURCE', 'TRACK',
    'defs', 'clipPath', 'linearGradient', 'radialGradient', 'mask', 'pattern', 'filter',
    'marker', 'symbol', 'title', 'desc', 'metadata', 'style', 'script']);
  const SHAPES = new Set(['circle', 'rect', 'ellipse', 'polygon', 'polyline', 'path', 'line',
    'image', 'use']);
  const CONTENT_NAMED = new Set(['button', 'link', 'tab', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'option', 'treeitem', 'heading', 'label', 'cell', 'columnheader',
    'rowheader', 'gridcell', 'listitem', 'summary', 'switch', 'checkbox', 'radio', 'tooltip']);
  const WIDGETS = new Set(['button', 'link', 'checkbox', 'radio', 'textbox', 'searchbox',
    'combobox', 'listbox', 'slider', 'spinbutton', 'tab', 'menuitem', 'menuitemcheckbox',
    'menuitemradio', 'option', 'switch', 'treeitem', 'gridcell', 'summary']);
  const FIELDS = new Set(['INPUT', 'SELECT', 'TEXTAREA']);
  const FORM = new Set(['INPUT', 'SELECT', 'TEXTAREA', 'BUTTON']);
  const TEXT_INPUTS = new Set(['text', 'password', 'email', 'search', 'tel', 'url', '']);
  const clean = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const clip = (s) => s.length > LIM ? s.slice(0, LIM - 3) + '...' : s;
  const q = (s) => JSON.stringify(clip(clean(s)));
  let seq = window.__farmRefSeq || 0;
  const used = new Set();
  const lines = [], refs = [];
  let more = 0;
  const focused = document.activeElement;

  function roleOf(el) {
    const explicit = (el.getAttribute('role') || '').split(/\s+/)[0];
    if (explicit === 'presentation' || explicit === 'none') return el.tagName.toLowerCase();
    if (explicit) return explicit;
    const tag = el.tagName;
    switch (tag.toUpperCase()) {
      case 'A': return el.hasAttribute('href') ? 'link' : 'a';
      case 'BUTTON': return 'button';
      case 'SUMMARY': return 'summary';
      case 'TEXTAREA': return 'textbox';
      case 'SELECT': return (el.multiple || el.size > 1) ? 'listbox' : 'combobox';
      case 'IMG': return 'img';
      case 'H1': case 'H2': case 'H3': case 'H4': case 'H5': case 'H6': return 'heading';
      case 'LABEL': return 'label';
      case 'LI': return 'listitem';
      case 'TD': return 'cell';
      case 'TH': return 'columnheader';
      case 'INPUT': {
        const t = (el.type || 'text').toLowerCase();
        if (t === 'checkbox' || t === 'radio') return t;
        if (t === 'button' || t === 'submit' || t === 'reset' || t === 'image') return 'button';
        if (t === 'range') return 'slider';
        if (t === 'number') return 'spinbutton';
        if (t === 'search') return 'searchbox';
        if (TEXT_INPUTS.has(t)) return 'textbox';
        return t;
      }
    }
    return el instanceof SVGElement ? tag : tag.toLowerCase();
  }

  function textExcept(node, skip) {
    let out = '';
    for (const child of node.childNodes) {
      if (child === skip) continue;
      if (child.nodeType === 3) out += ' ' + child.data;
      else if (child.nodeType === 1 && !SKIP.has(child.tagName)) {
        out += ' ' + textExcept(child, skip);
      }
    }
    return out;
  }

  function editableHost(el) {
    const parent = el.parentElement;
    return el.isContentEditable && (parent === null || !parent.isContentEditable);
  }

  // the element's text as it reads: its text nodes and the text of inline descendants
  // (not of blocks, form controls or SVG, which are listed on their own lines)
  function inlineText(el) {
    let out = '';
    for (const child of el.childNodes) {
      if (child.nodeType === 3) out += child.data;
      else if (child.nodeType === 1) {
        const t = child.tagName;
        if (SKIP.has(t) || child instanceof SVGElement || FORM.has(t) ||
            (t === 'LABEL' && rendered(child.control))) {
          out += ' ';
          continue;
        }
        const d = getComputedStyle(child).display;
        if (d === 'none') continue;
        out += (d.startsWith('inline') || d === 'contents') ? inlineText(child) : ' ';
      }
    }
    return out;
  }

  function labelName(el) {
    const aria = el.getAttribute('aria-label');
    if (aria && clean(aria)) return clean(aria);
    const by = el.getAttribute('aria-labelledby');
    if (by) {
      const t = by.split(/\s+/).map((id) => {
        const n = document.getElementById(id);
        return n ? n.textContent : '';
      }).join(' ');
      if (clean(t)) return clean(t);
    }
    if (el.labels && el.labels.length) {
      const t = clean(textExcept(el.labels[0], el));
      if (t) return t;
    }
    for (const attr of ['placeholder', 'title', 'alt']) {
      const v = el.getAttribute(attr);
      if (v && clean(v)) return clean(v);
    }
    if (el.tagName === 'INPUT' && ['button', 'submit', 'reset'].includes(el.type)) {
      return clean(el.value);
    }
    return '';
  }

  function valueOf(el, role) {
    const tag = el.tagName;
    if (tag === 'INPUT') {
      const t = (el.type || 'text').toLowerCase();
      if (t === 'checkbox' || t === 'radio') return [el.checked ? 'checked' : 'unchecked', null];
      if (['button', 'submit', 'reset', 'image', 'file'].includes(t)) return [null, null];
      return [el.value, null];
    }
    if (tag === 'TEXTAREA') return [el.value, null];
    if (tag === 'SELECT') {
      const opts = Array.from(el.options).map((o) => clip(clean(o.text)));
      const sel = Array.from(el.selectedOptions).map((o) => clean(o.text)).join(', ');
      return [sel, opts];
    }
    const checked = el.getAttribute('aria-checked');
    if (checked !== null && (role === 'checkbox' || role === 'radio' || role === 'switch' ||
        role.startsWith('menuitem'))) return [checked === 'true' ? 'checked' : 'unchecked', null];
    const now = el.getAttribute('aria-valuenow');
    if (now !== null) return [now, null];
    if (editableHost(el)) return [el.innerText, null];
    return [null, null];
  }

  function isWidget(el, role) {
    if (WIDGETS.has(role)) return true;
    const tag = el.tagName;
    if (tag === 'INPUT' || tag === 'SELECT' || tag === 'TEXTAREA' || tag === 'BUTTON') return true;
    if (editableHost(el)) return true;
    if (el.hasAttribute('onclick')) return true;
    const ti = el.getAttribute('tabindex');
    return ti !== null && +ti >= 0 && el !== document.body;
  }

  function rendered(el) {
    if (!el) return false;
    const r = el.getBoundingClientRect();
    return r.width > 0 && r.height > 0 && getComputedStyle(el).visibility === 'visible';
  }

  function refOf(el) {
    let ref = +el.getAttribute('data-farm-ref');
    if (!ref || used.has(ref)) {
      ref = ++seq;
      el.setAttribute('data-farm-ref', String(ref));
    }
    used.add(ref);
    return ref;
  }

  function visit(el, covered, transparent) {
    const tag = el.tagName;
    if (SKIP.has(tag) || SKIP.has(tag.toUpperCase())) return;
    if (exclude && el.matches(exclude)) return;
    if (tag === 'INPUT' && el.type === 'hidden') return;
    const cs = getComputedStyle(el);
    if (cs.display === 'none') return;
    transparent = transparent || cs.opacity === '0';
    const r = el.getBoundingClientRect();
    const shown = !transparent && cs.visibility === 'visible' && r.width > 0 && r.height > 0 &&
      r.right > 0 && r.bottom > 0 && r.left < W && r.top < H;
    const role = roleOf(el);
    const widget = isWidget(el, role);
    // a label of a rendered control names that control instead of getting a line
    const labelOfControl = tag === 'LABEL' && !el.getAttribute('role') && rendered(el.control);
    let name = labelName(el), wraps = false;
    if (CONTENT_NAMED.has(role) && !labelOfControl && !FIELDS.has(tag)) {
      // short contents are this element's name; long ones are listed element by element
      const all = clean(el.textContent);
      if (all.length <= LIM) {
        wraps = true;
        if (!name) name = all;
      }
    }
    if (!name && !wraps && !FIELDS.has(tag)) name = clean(inlineText(el));
    const graphic = tag === 'IMG' || tag === 'CANVAS' || tag === 'svg' || SHAPES.has(tag) ||
      (tag === 'text' && el instanceof SVGElement);
    const leaf = el.children.length === 0;
    const cls = clean(el.getAttribute('class'));
    const [value, options] = valueOf(el, role);
    const emit = shown && !labelOfControl &&
      (widget || graphic || value !== null || (!covered && (name !== '' || (leaf && cls))));
    if (emit) {
      if (lines.length >= MAXL) more++;
      else {
        const ref = refOf(el);
        let line = '[' + ref + '] ' + role + ' ' + q(name);
        if (name === '' && cls) line += ' class=' + q(cls.slice(0, 40));
        if (value !== null) line += ' value=' + q(value);
        if (options !== null) line += ' options=' + JSON.stringify(options);
        if (el === focused && el !== document.body) line += ' focused';
        if (el.disabled || el.getAttribute('aria-disabled') === 'true') line += ' disabled';
        line += ' @(' + Math.round(r.left) + ',' + Math.round(r.top) + ',' +
          Math.round(r.width) + ',' + Math.round(r.height) + ')';
        lines.push(line);
        refs.push(ref);
      }
    }
    if (tag === 'SELECT') return;
    const coverChildren = covered || (emit && wraps) || labelOfControl;
    for (const child of el.children) visit(child, coverChildren, transparent);
    if (el.shadowRoot) {
      for (const child of el.shadowRoot.children) visit(child, coverChildren, transparent);
    }
  }

  if (document.body) visit(document.body, false, false);
  window.__farmRefSeq = seq;
  if (more) lines.push('... ' + more + ' more elements not listed');
  return {lines: lines, refs: refs, title: document.title, url: location.href};
}
"""

#: Find element ``ref``; scroll it into view if no part of it is in the observed
#: area; return the center of its visible part (or say why it cannot be acted on).
LOCATE_JS = r"""
([ref, W, H]) => {
  const el = document.querySelector('[data-farm-ref="' + ref + '"]');
  if (!el) return {found: false};
  const part = () => {
    const r = el.getBoundingClientRect();
    const x0 = Math.max(r.left, 0), y0 = Math.max(r.top, 0);
    const x1 = Math.min(r.right, W), y1 = Math.min(r.bottom, H);
    return {r: r, inside: x1 > x0 && y1 > y0, x: (x0 + x1) / 2, y: (y0 + y1) / 2};
  };
  let p = part();
  if (p.r.width > 0 && p.r.height > 0 && !p.inside) {
    el.scrollIntoView({block: 'center', inline: 'nearest', behavior: 'instant'});
    p = part();
  }
  const tag = el.tagName.toLowerCase();
  const info = {found: true, tag: tag, x: Math.floor(p.x), y: Math.floor(p.y),
    w: p.r.width, h: p.r.height, inside: p.inside,
    cx: p.r.left + p.r.width / 2, cy: p.r.top + p.r.height / 2,
    type: (el.type || '').toLowerCase(), editable: el.isContentEditable,
    disabled: !!el.disabled, covered: null};
  if (p.inside) {
    const hit = document.elementFromPoint(info.x, info.y);
    if (hit && hit !== el && !el.contains(hit) && hit.control !== el &&
        !(el.labels && Array.from(el.labels).includes(hit))) {
      let d = '<' + hit.tagName.toLowerCase();
      if (hit.id) d += ' id=' + hit.id;
      const ref2 = hit.getAttribute('data-farm-ref');
      if (ref2) d += ' ref=' + ref2;
      info.covered = d + '>';
    }
  }
  return info;
}
"""

#: Choose an option of <select> ``ref`` by its text (or value) the way a user would.
SELECT_JS = r"""
([ref, wanted]) => {
  const el = document.querySelector('[data-farm-ref="' + ref + '"]');
  if (!el) return {error: 'missing'};
  if (el.tagName !== 'SELECT') return {error: 'not-select', tag: el.tagName.toLowerCase()};
  if (el.disabled) return {error: 'disabled'};
  const clean = (s) => (s || '').replace(/\s+/g, ' ').trim();
  const opts = Array.from(el.options);
  const w = clean(wanted);
  const pick = opts.find((o) => clean(o.text) === w) || opts.find((o) => o.value === wanted) ||
    opts.find((o) => clean(o.text).toLowerCase() === w.toLowerCase());
  if (!pick) return {error: 'no-option', options: opts.map((o) => clean(o.text))};
  if (pick.disabled) return {error: 'option-disabled'};
  el.focus();
  el.value = pick.value;
  pick.selected = true;
  el.dispatchEvent(new Event('input', {bubbles: true}));
  el.dispatchEvent(new Event('change', {bubbles: true}));
  return {selected: clean(pick.text)};
}
"""


@dataclass(frozen=True)
class TextView:
    """A rendered text view and the refs it lists (in order)."""

    text: str
    refs: tuple[int, ...]
    title: str = ""

    @classmethod
    def from_js(cls, result: dict[str, Any]) -> TextView:
        return cls(
            "\n".join(result["lines"]),
            tuple(int(r) for r in result["refs"]),
            str(result.get("title") or ""),
        )


def format_refs(refs: Iterable[int], limit: int = 30) -> str:
    """``[1, 2, 3, 7, 9, 10]`` -> ``"1-3, 7, 9-10"`` (clipped after ``limit`` runs)."""
    ordered = sorted(set(refs))
    if not ordered:
        return "none (the text view lists no elements)"
    runs: list[str] = []
    start = prev = ordered[0]
    for r in [*ordered[1:], None]:
        if r is not None and r == prev + 1:
            prev = r
            continue
        runs.append(str(start) if start == prev else f"{start}-{prev}")
        if r is not None:
            start = prev = r
    if len(runs) > limit:
        return ", ".join(runs[:limit]) + ", ..."
    return ", ".join(runs)
