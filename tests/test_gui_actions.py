"""The shared GUI action model: strict text parser, structured space, key combos."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from env_adapters.gui import actions as A
from env_adapters.gui import spaces as S
from env_adapters.gui.keys import parse_combo

coord = st.integers(-5000, 5000)
ref = st.integers(0, S.MAX_REF - 1)
text = st.text(alphabet=sorted(S.CHARSET), max_size=40)
any_action = st.one_of(
    st.builds(A.Click, coord, coord),
    st.builds(lambda x, y: A.Click(x, y, count=2), coord, coord),
    st.builds(lambda x, y: A.Click(x, y, button="right"), coord, coord),
    st.builds(A.Move, coord, coord),
    st.builds(A.Drag, coord, coord, coord, coord),
    st.builds(A.Scroll, coord, coord, coord, coord),
    st.builds(A.TypeText, text),
    st.builds(A.Key, st.sampled_from(["ctrl+a", "Enter", "shift+Tab", "a"])),
    st.builds(A.ClickElement, ref),
    st.builds(A.TypeElement, ref, text),
    st.builds(A.SelectElement, ref, text),
    st.builds(A.Wait, st.integers(0, A.MAX_WAIT_MS)),
    st.just(A.Done()),
    st.just(A.Fail()),
)


@settings(max_examples=300, deadline=None)
@given(any_action)
def test_text_form_round_trips(action):
    assert A.parse_action(A.format_action(action)) == action


@settings(max_examples=300, deadline=None)
@given(any_action)
def test_structured_form_round_trips(action):
    value = S.to_structured(action)
    assert S.structured_action_space().contains(value)
    assert S.from_structured(value) == action


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("click(120, 45)", A.Click(120, 45)),
        ("  click( 1 ,2 )  ", A.Click(1, 2)),
        ("double_click(3, 4)", A.Click(3, 4, count=2)),
        ("right_click(3, 4)", A.Click(3, 4, button="right")),
        ('type("say \\"hi\\"\\n")', A.TypeText('say "hi"\n')),
        ('type("caf\\u00e9")', A.TypeText("café")),
        ('key("ctrl+a")', A.Key("ctrl+a")),
        ("click_element(12)", A.ClickElement(12)),
        ('type_element(3, "x")', A.TypeElement(3, "x")),
        ('select_element(1, "Blue")', A.SelectElement(1, "Blue")),
        ("scroll(10, 20, 0, -300)", A.Scroll(10, 20, 0, -300)),
        ("wait(0)", A.Wait(0)),
        ("done()", A.Done()),
        ("fail()", A.Fail()),
    ],
)
def test_parse(text, expected):
    assert A.parse_action(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "expected name\\(args\\)"),
        ("click", "expected name\\(args\\)"),
        ("clik(1, 2)", "unknown action 'clik'"),
        ("click(1)", "takes 2 argument\\(s\\), got 1"),
        ("click(1, 2, 3)", "takes 2 argument\\(s\\), got 3"),
        ('click("1", 2)', "argument 1 must be an integer"),
        ("type(hello)", "cannot parse the arguments of type"),
        ("type('hello')", "cannot parse the arguments of type"),
        ('type("a",)', "missing after the last comma"),
        ("click(1,,2)", "unexpected comma"),
        ("click(1 2)", "separated by commas"),
        ("click(1, 2) and more", "unexpected text after click"),
        ("click(1.5, 2)", "cannot parse the arguments"),
        ("wait(99999)", "0..10000 ms"),
        ('key("")', "needs a key name"),
        ("click_element(-1)", "refs are >= 0"),
        ('type("unterminated)', "cannot parse the arguments"),
    ],
)
def test_parse_errors_name_the_problem(text, message):
    with pytest.raises(A.ActionError, match=message):
        A.parse_action(text)


def test_a_megabyte_of_text_parses_quickly():
    big = "x" * (1 << 20)
    assert A.parse_action(f'type("{big}")') == A.TypeText(big)


@settings(max_examples=500, deadline=None)
@given(st.text(max_size=80))
def test_parser_never_raises_anything_but_action_error(garbage):
    with contextlib.suppress(A.ActionError):
        A.parse_action(garbage)


@pytest.mark.parametrize(
    ("combo", "playwright"),
    [
        ("ctrl+a", "Control+a"),
        ("Enter", "Enter"),
        ("return", "Enter"),
        ("shift+Tab", "Shift+Tab"),
        ("cmd+shift+z", "Meta+Shift+z"),
        ("space", " "),
        ("esc", "Escape"),
        ("ctrl++", "Control++"),
        ("F5", "F5"),
    ],
)
def test_key_combos(combo, playwright):
    assert parse_combo(combo).playwright() == playwright


@pytest.mark.parametrize(
    ("combo", "message"), [("hyper+a", "unknown modifier"), ("Foo", "unknown key")]
)
def test_unknown_keys(combo, message):
    with pytest.raises(A.ActionError, match=message):
        parse_combo(combo)


def test_sanitize_keeps_charset():
    out = S.sanitize("ok \u4e2d\u6587 ✓", 100)
    assert out == "ok ?? ?" and all(c in S.CHARSET for c in out)
    assert S.observation_space(20, 10)["text"].contains(out)
