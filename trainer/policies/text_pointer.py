"""A small PyTorch pointer policy over the text view and the instruction.

It picks one of ``click_element(e)``, ``type_element(e, text)`` (for text
fields) for the elements ``e`` of the text view, or ``fail()``; a typed text is
one of the instruction's quoted strings or words. Per element, an MLP reads its
role, name and value words (hashed embeddings), how they match the instruction
(exact and word-level matches, checkbox state, focus, box) and the instruction's
embedding; the ``fail()`` logit reads the pooled elements and the instruction.
About 400k parameters (most in the hashed word embeddings): it learns MiniWoB++'s
click/tab/link/checkbox/text tasks on a CPU in minutes and generalises to unseen
seeds because it matches words rather than memorising them.

Action log-probability: ``log pi(a) = log softmax(option logits)[option]``
``+ [type] log softmax(candidate logits | element)[candidate]``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from env_adapters.gui import actions as A
from trainer.api.policy import ActOutput, Policy
from trainer.policies.features import (
    CANDIDATE_FEATURES,
    ELEMENT_FEATURES,
    Encoded,
    encode,
)
from trainer.util import require_torch

torch = require_torch()
nn = torch.nn
NEG = -1e9


class _Net(nn.Module):
    def __init__(self, vocab: int, dim: int, hidden: int) -> None:
        super().__init__()
        nf, ncf = len(ELEMENT_FEATURES), len(CANDIDATE_FEATURES)
        self.word = nn.Embedding(vocab, dim, padding_idx=0)
        self.feat = nn.Linear(nf, dim)
        self.elem = nn.Sequential(nn.Linear(5 * dim, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.ctx = nn.Sequential(nn.Linear(3 * dim, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.click_head = nn.Linear(dim, 1)
        self.type_head = nn.Linear(dim, 1)
        self.click_skip = nn.Linear(nf, 1)
        self.type_skip = nn.Linear(nf, 1)
        self.fail = nn.Sequential(nn.Linear(3 * dim + nf, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        self.cand = nn.Sequential(nn.Linear(dim + ncf, hidden), nn.Tanh(), nn.Linear(hidden, dim))
        self.cand_elem = nn.Linear(dim, dim, bias=False)
        self.cand_skip = nn.Linear(ncf, 1)
        with torch.no_grad():  # start uniform over the options; fail() less likely
            for head in (self.click_head, self.type_head, self.click_skip, self.type_skip):
                head.weight.zero_()
                head.bias.zero_()
            self.fail[-1].weight.zero_()
            self.fail[-1].bias.fill_(-2.0)
            # prior: what an instruction quotes is what it asks to type
            self.cand_skip.weight.zero_()
            self.cand_skip.weight[0, CANDIDATE_FEATURES.index("quoted")] = 2.0

    def _bag(self, ids: Any) -> Any:
        """Mean of the non-padding word embeddings along the last axis."""
        emb = self.word(ids)
        mask = (ids > 0).unsqueeze(-1).float()
        return (emb * mask).sum(-2) / mask.sum(-2).clamp(min=1.0)

    def forward(self, b: dict[str, Any]) -> tuple[Any, Any]:
        """Option logits (N, 2E + 1) and candidate logits (N, E, C), masked."""
        instr = self._bag(b["instr"])  # (N, d)
        feats = b["elem_feats"]  # (N, E, F)
        role = self.word(b["elem_role"])
        name = self._bag(b["elem_name"])
        value = self._bag(b["elem_value"])
        inst_e = instr.unsqueeze(1).expand_as(name)
        h = self.elem(torch.cat([role, name, value, self.feat(feats), name * inst_e], -1))
        emask = b["elem_mask"].unsqueeze(-1).float()
        pooled = (h * emask).sum(1) / emask.sum(1).clamp(min=1.0)
        hmax = (h + (emask - 1.0) * 1e4).max(1).values
        h = self.ctx(torch.cat([h, pooled.unsqueeze(1).expand_as(h), inst_e], -1))
        click = (self.click_head(h) + self.click_skip(feats)).squeeze(-1)
        typ = (self.type_head(h) + self.type_skip(feats)).squeeze(-1)
        click = click.masked_fill(~b["elem_mask"], NEG)
        typ = typ.masked_fill(~b["can_type"], NEG)
        # the best match of each feature over the elements ("no element is named as quoted")
        fmax = (feats + (emask - 1.0) * 1e4).max(1).values
        fail = self.fail(torch.cat([instr, pooled, hmax, fmax], -1))
        fail = fail.masked_fill(~b["fail_ok"].unsqueeze(-1), NEG)
        options = torch.cat([click, typ, fail], -1)
        cand = self.cand(torch.cat([self.word(b["cand_tok"]), b["cand_feats"]], -1))  # (N, C, d)
        cl = torch.einsum("ned,ncd->nec", self.cand_elem(h), cand)
        cl = cl + self.cand_skip(b["cand_feats"]).squeeze(-1).unsqueeze(1)
        cl = cl.masked_fill(~b["cand_mask"].unsqueeze(1), NEG)
        return options, cl


class TextPointerPolicy(Policy):
    """See the module doc. ``actions`` limits the kinds it may emit."""

    def __init__(
        self,
        *,
        vocab: int = 4096,
        dim: int = 64,
        hidden: int = 128,
        max_elements: int = 48,
        max_candidates: int = 16,
        actions: Sequence[str] = ("click_element", "type_element", "fail"),
        seed: int = 0,
    ) -> None:
        unknown = set(actions) - {"click_element", "type_element", "fail"}
        if unknown:
            raise ValueError(f"text-pointer policy cannot emit {sorted(unknown)}")
        torch.manual_seed(seed)
        self.net = _Net(vocab, dim, hidden)
        self.vocab, self.max_elements, self.max_candidates = vocab, max_elements, max_candidates
        self.actions = tuple(actions)
        self.version = 0
        self._gen = torch.Generator().manual_seed(seed + 1)

    # ------------------------------------------------------------------ batching

    def _encode(self, obs: Mapping[str, Any]) -> Encoded:
        return encode(
            obs,
            vocab=self.vocab,
            max_elements=self.max_elements,
            max_candidates=self.max_candidates,
        )

    def _collate(self, encs: Sequence[Encoded]) -> dict[str, Any]:
        n = len(encs)
        e = max(len(x.refs) for x in encs)
        c = max(len(x.candidates) for x in encs)
        nf, ncf = len(ELEMENT_FEATURES), len(CANDIDATE_FEATURES)
        feats = np.zeros((n, e, nf), np.float32)
        role = np.zeros((n, e), np.int64)
        name = np.zeros((n, e, encs[0].elem_name.shape[1]), np.int64)
        value = np.zeros((n, e, encs[0].elem_value.shape[1]), np.int64)
        emask = np.zeros((n, e), bool)
        ctype = np.zeros((n, e), bool)
        cfeats = np.zeros((n, c, ncf), np.float32)
        ctok = np.zeros((n, c), np.int64)
        cmask = np.zeros((n, c), bool)
        instr = np.stack([x.instr for x in encs])
        for i, x in enumerate(encs):
            k, m = len(x.refs), len(x.candidates)
            feats[i, :k], role[i, :k], name[i, :k], value[i, :k] = (
                x.elem_feats,
                x.elem_role,
                x.elem_name,
                x.elem_value,
            )
            emask[i, :k] = True
            ctype[i, :k] = x.can_type & ("type_element" in self.actions)
            cfeats[i, :m], ctok[i, :m], cmask[i, :m] = x.cand_feats, x.cand_tok, True
        if "click_element" not in self.actions:
            emask[:] = False
        t = torch.from_numpy
        return {
            "elem_feats": t(feats),
            "elem_role": t(role),
            "elem_name": t(name),
            "elem_value": t(value),
            "elem_mask": t(emask),
            "can_type": t(ctype),
            "instr": t(instr),
            "cand_feats": t(cfeats),
            "cand_tok": t(ctok),
            "cand_mask": t(cmask),
            "fail_ok": torch.full((n,), "fail" in self.actions, dtype=torch.bool),
            "E": e,
        }

    # ------------------------------------------------------------------ Policy

    def act(
        self,
        observations: Sequence[Mapping[str, Any]],
        *,
        greedy: bool = False,
        explore: Sequence[float] | None = None,
    ) -> list[ActOutput]:
        encs = [self._encode(o) for o in observations]
        b = self._collate(encs)
        e = b["E"]
        with torch.no_grad():
            opt_logits, cand_logits = self.net(b)
            opt_lp = torch.log_softmax(opt_logits, -1)
            cand_lp = torch.log_softmax(cand_logits, -1)
            # behaviour = (1 - eps) * pi + eps * uniform over the valid options
            eps = torch.tensor(list(explore) if explore else [0.0] * len(encs)).unsqueeze(-1)
            valid = (opt_logits > NEG / 2).float()
            uniform = valid / valid.sum(-1, keepdim=True)
            beh_lp = torch.log((1 - eps) * opt_lp.exp() + eps * uniform).clamp(min=-1e4)
            if greedy:
                opts = opt_lp.argmax(-1)
            else:
                opts = torch.multinomial(beh_lp.exp(), 1, generator=self._gen).squeeze(-1)
        out = []
        for i, enc in enumerate(encs):
            o = int(opts[i])
            lp = float(opt_lp[i, o])
            blp = float(beh_lp[i, o]) if not greedy else lp
            cand = -1
            if o == 2 * e:
                action = "fail()"
            elif o >= e:
                el = o - e
                row = cand_lp[i, el]
                cand = (
                    int(row.argmax())
                    if greedy
                    else int(torch.multinomial(row.exp(), 1, generator=self._gen))
                )
                lp += float(row[cand])
                blp += float(row[cand])
                action = A.format_action(A.TypeElement(enc.refs[el], enc.candidates[cand]))
            else:
                action = A.format_action(A.ClickElement(enc.refs[o]))
            out.append(ActOutput(action, blp, self.version, enc, (o, cand, e), policy_logprob=lp))
        return out

    def _choice_index(self, choice: tuple[int, int, int], e: int) -> tuple[int, int, int]:
        """Re-base an option index recorded with ``E = choice[2]`` elements to ``e``."""
        o, cand, e0 = choice
        if o == 2 * e0:
            return 2 * e, -1, -1
        if o >= e0:
            return e + (o - e0), cand, o - e0
        return o, -1, -1

    def logprobs(self, contexts: Sequence[Any], choices: Sequence[Any]) -> Any:
        b = self._collate(contexts)
        e = b["E"]
        opt_logits, cand_logits = self.net(b)
        opt_lp = torch.log_softmax(opt_logits, -1)
        cand_lp = torch.log_softmax(cand_logits, -1)
        idx = [self._choice_index(c, e) for c in choices]
        rows = torch.arange(len(idx))
        lp = opt_lp[rows, torch.tensor([i[0] for i in idx])]
        typed = [(r, i[2], i[1]) for r, i in enumerate(idx) if i[1] >= 0]
        if typed:
            r, el, c = (torch.tensor(v) for v in zip(*typed, strict=True))
            lp = lp.index_add(0, r, cand_lp[r, el, c])
        return lp

    def entropy(self, contexts: Sequence[Any]) -> Any:
        b = self._collate(contexts)
        opt_logits, _ = self.net(b)
        lp = torch.log_softmax(opt_logits, -1)
        p = lp.exp()
        return -(p * lp.clamp(min=-50)).sum(-1)

    def parameters(self) -> Any:
        return self.net.parameters()

    def get_weights(self) -> dict[str, Any]:
        return {k: v.detach().clone() for k, v in self.net.state_dict().items()}

    def set_weights(self, weights: Mapping[str, Any], version: int) -> None:
        self.net.load_state_dict(dict(weights))
        self.version = int(version)

    def train_mode(self, on: bool) -> None:
        self.net.train(on)
