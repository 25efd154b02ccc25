"""Features of the shared GUI observation for small policies: the text view's
elements, the instruction's words and quoted strings, and the candidate texts to
type, encoded as small numpy arrays (a step's stored context)."""

from __future__ import annotations

import re
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from env_adapters.gui.textview import Element, parse_text_view

WORD = re.compile(r"[A-Za-z0-9]+")
QUOTED = re.compile(r'"([^"]+)"')
NAME_TOKENS, VALUE_TOKENS, INSTR_TOKENS = 6, 4, 24
#: element feature names (order = the columns of ``Encoded.elem_feats``)
ELEMENT_FEATURES = (
    "name_is_quoted",
    "name_is_quoted_case",
    "name_tokens_in_instruction",
    "instruction_tokens_in_name",
    "name_words_in_instruction",
    "value_is_quoted",
    "value_is_candidate",
    "value_empty",
    "has_value",
    "checked",
    "unchecked",
    "focused",
    "disabled",
    "name_empty",
    "is_instruction",
    "inside_instruction",
    "x",
    "y",
    "w",
    "h",
    "position",
)
CANDIDATE_FEATURES = ("quoted", "length", "position", "typed_somewhere", "capitalised")
TEXT_ROLES = frozenset({"textbox", "searchbox", "combobox", "textarea", "spinbutton", "text"})


def tokens(text: str) -> list[str]:
    return [w.lower() for w in WORD.findall(text)]


def hash_token(token: str, vocab: int) -> int:
    """A stable id in ``1..vocab-1`` (0 is padding)."""
    return 1 + zlib.crc32(token.encode()) % (vocab - 1)


def typeable(el: Element) -> bool:
    """Elements ``type_element`` makes sense on: text fields (checkbox states are not text)."""
    if el.disabled:
        return False
    if el.role in TEXT_ROLES:
        return True
    return el.value is not None and el.value not in ("checked", "unchecked")


@dataclass
class Encoded:
    """One observation, encoded (numpy; stored with every step)."""

    elem_feats: np.ndarray  # (E, F) float32
    elem_role: np.ndarray  # (E,) int64
    elem_name: np.ndarray  # (E, NAME_TOKENS) int64
    elem_value: np.ndarray  # (E, VALUE_TOKENS) int64
    can_type: np.ndarray  # (E,) bool
    instr: np.ndarray  # (INSTR_TOKENS,) int64
    cand_feats: np.ndarray  # (C, len(CANDIDATE_FEATURES)) float32
    cand_tok: np.ndarray  # (C,) int64
    refs: tuple[int, ...]
    candidates: tuple[str, ...]


def candidates_of(instruction: str, limit: int) -> list[str]:
    """Texts a policy may type: the instruction's quoted strings, then its words."""
    out: list[str] = []
    for q in QUOTED.findall(instruction):
        if q not in out:
            out.append(q)
    for w in re.findall(r"[^\s\"',.;:!?()]+", instruction):
        if w not in out:
            out.append(w)
    return out[:limit] or [""]


def _is_instruction(el: Element, instruction: str) -> bool:
    return bool(instruction) and el.name.strip() == instruction.strip()


def _inside(box: tuple[int, int, int, int], frame: tuple[int, int, int, int]) -> bool:
    x, y, w, h = box
    fx, fy, fw, fh = frame
    return fx <= x and fy <= y and x + w <= fx + fw and y + h <= fy + fh


def _ids(words: list[str], n: int, vocab: int) -> np.ndarray:
    ids = np.zeros(n, np.int64)
    for i, w in enumerate(words[:n]):
        ids[i] = hash_token(w, vocab)
    return ids


def encode(
    obs: Mapping[str, Any], *, vocab: int, max_elements: int, max_candidates: int
) -> Encoded:
    instruction = str(obs.get("instruction", ""))
    elements = parse_text_view(str(obs.get("text", "")))[:max_elements]
    shot = obs.get("screenshot")
    height, width = (shot.shape[0], shot.shape[1]) if hasattr(shot, "shape") else (1, 1)
    itoks = tokens(instruction)
    iset = set(itoks)
    quoted = QUOTED.findall(instruction)
    qfold = {q.casefold() for q in quoted}
    cands = candidates_of(instruction, max_candidates)
    cfold = {c.casefold() for c in cands}
    ifold = instruction.casefold()
    typed: set[str] = set()
    n = max(1, len(elements))
    frame = next((el.box for el in elements if _is_instruction(el, instruction)), None)
    feats = np.zeros((n, len(ELEMENT_FEATURES)), np.float32)
    role = np.zeros(n, np.int64)
    name = np.zeros((n, NAME_TOKENS), np.int64)
    value = np.zeros((n, VALUE_TOKENS), np.int64)
    can_type = np.zeros(n, bool)
    for i, el in enumerate(elements):
        ntoks = tokens(el.name)
        nset = set(ntoks)
        inter = nset & iset
        x, y, w, h = el.box
        words_in = bool(el.name) and re.search(
            r"(?<![A-Za-z0-9])" + re.escape(el.name.casefold()) + r"(?![A-Za-z0-9])", ifold
        )
        v = el.value
        if v:
            typed.add(v.casefold())
        feats[i] = (
            el.name.casefold() in qfold,
            el.name in quoted,
            len(inter) / max(1, len(nset)),
            len(inter) / max(1, len(iset)),
            bool(words_in),
            bool(v) and v.casefold() in qfold,
            bool(v) and v.casefold() in cfold,
            v == "",
            v is not None,
            v == "checked",
            v == "unchecked",
            el.focused,
            el.disabled,
            el.name == "",
            _is_instruction(el, instruction),
            frame is not None and not _is_instruction(el, instruction) and _inside(el.box, frame),
            x / width,
            y / height,
            w / width,
            h / height,
            i / n,
        )
        role[i] = hash_token("role:" + el.role, vocab)
        name[i] = _ids(ntoks, NAME_TOKENS, vocab)
        value[i] = _ids(tokens(v or ""), VALUE_TOKENS, vocab)
        can_type[i] = typeable(el)
    cfeats = np.zeros((len(cands), len(CANDIDATE_FEATURES)), np.float32)
    ctok = np.zeros(len(cands), np.int64)
    for j, c in enumerate(cands):
        cfeats[j] = (
            c in quoted,
            min(len(c), 40) / 40,
            j / len(cands),
            c.casefold() in typed,
            c[:1].isupper(),
        )
        ctok[j] = hash_token(c.lower(), vocab)
    return Encoded(
        elem_feats=feats,
        elem_role=role,
        elem_name=name,
        elem_value=value,
        can_type=can_type,
        instr=_ids(itoks, INSTR_TOKENS, vocab),
        cand_feats=cfeats,
        cand_tok=ctok,
        refs=tuple(el.ref for el in elements) or (0,),
        candidates=tuple(cands),
    )
