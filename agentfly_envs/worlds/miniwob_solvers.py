"""Scripted solvers of the offered MiniWoB tasks, for golden episodes.

A solver reads the task's fields (MiniWoB's parse of the instruction, e.g. ``{"target": "Yes"}``) and the page,
and yields one :class:`~agentfly_envs.worlds.miniwob.BrowserAction` at a time; the caller carries each out before
asking for the next, so a solver sees what its last action changed (a tab that opened, a menu that appeared).
Actions name elements by their ids; the ``click``/``type`` tools turn them into coordinates in screenshot mode.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from agentfly_envs.errors import AgentflyError
from agentfly_envs.worlds.miniwob import BrowserAction, Element, Page

PageView = Callable[[], Page]
"""Returns the page as it is now."""
Solver = Callable[[PageView], Iterator[BrowserAction]]


def _find(page: Page, what: str, predicate: Callable[[Element], bool]) -> Element:
    for element in page.elements:
        if element.ref > 0 and predicate(element):
            return element
    raise AgentflyError(f"the solver found no {what} on the page ({page.utterance!r})")


def _children(page: Page, parent: int) -> list[Element]:
    return [element for element in page.elements if element.parent == parent]


def _below(page: Page, ancestor: int) -> list[Element]:
    """The elements under ``ancestor``, in document order."""
    inside, found = {ancestor}, []
    for element in page.elements:
        if element.parent in inside:
            inside.add(element.ref)
            found.append(element)
    return found


def _click(element: Element) -> BrowserAction:
    return BrowserAction("click", ref=element.ref)


def _type(element: Element, text: str) -> BrowserAction:
    return BrowserAction("type", ref=element.ref, text=text)


def _button(page: Page, text: str) -> Element:
    return _find(page, f"button {text!r}", lambda e: e.tag == "button" and e.text.lower() == text.lower())


def click_button(view: PageView) -> Iterator[BrowserAction]:
    page = view()
    yield _click(_button(page, page.fields["target"]))


def click_link(view: PageView) -> Iterator[BrowserAction]:
    page = view()
    target = page.fields["target"]
    yield _click(_find(page, f"link {target!r}", lambda e: e.text == target and "alink" in e.classes.split()))


def click_checkboxes(view: PageView) -> Iterator[BrowserAction]:
    page = view()
    for key, label in sorted(page.fields.items()):
        if not key.startswith("target"):
            continue
        text = next(e for e in page.elements if e.tag == "t" and e.text == label)
        yield _click(
            _find(page, f"checkbox {label!r}", lambda e, t=text: e.parent == t.parent and e.tag.endswith("box"))
        )
    yield _click(_button(page, "Submit"))


def enter_text(view: PageView) -> Iterator[BrowserAction]:
    page = view()
    yield _type(_find(page, "text field", lambda e: e.tag == "input_text"), page.fields["target"])
    yield _click(_button(page, "Submit"))


def focus_text(view: PageView) -> Iterator[BrowserAction]:
    yield _click(_find(view(), "text field", lambda e: e.tag == "input_text"))


def choose_list(view: PageView) -> Iterator[BrowserAction]:
    page = view()
    target = page.fields["target"]
    chooser = _find(page, "list", lambda e: e.tag == "select")
    yield _type(chooser, target[:64])  # a focused drop-down list selects the option its typed prefix names
    yield BrowserAction("press", text="Enter")  # and a list opened by a click closes on it
    if view().element(chooser.ref).value != target:
        raise AgentflyError(f"typing {target!r} did not select it in the list")
    yield _click(_button(view(), "Submit"))


def login_user(view: PageView) -> Iterator[BrowserAction]:
    page = view()
    yield _type(_find(page, "username field", lambda e: e.id == "username"), page.fields["username"])
    yield _type(_find(page, "password field", lambda e: e.id == "password"), page.fields["password"])
    yield _click(_button(page, "Login"))


def click_tab(view: PageView) -> Iterator[BrowserAction]:
    page = view()
    name = f"Tab #{page.fields['target']}"
    yield _click(_find(page, name, lambda e: e.tag == "a" and e.text == name))


def use_autocomplete(view: PageView) -> Iterator[BrowserAction]:
    page = view()
    start, end = page.fields["start"], page.fields.get("end", "")
    yield _type(_find(page, "text field", lambda e: e.tag == "input_text"), start)
    page = view()
    yield _click(
        _find(page, "menu item", lambda e: e.text.startswith(start) and e.text.endswith(end) and e.tag == "div")
    )
    yield _click(_button(view(), "Submit"))


def email_inbox(view: PageView) -> Iterator[BrowserAction]:
    page = view()
    sender, task = page.fields["by"], page.fields["task"]
    name = _find(page, f"email from {sender!r}", lambda e: "email-sender" in e.classes.split() and e.text == sender)
    thread = page.element(page.element(name.parent).parent)
    if task in ("delete", "star"):
        icon = "trash" if task == "delete" else "star"
        yield _click(_find(page, f"{icon} icon", lambda e: e in _below(page, thread.ref) and e.classes == icon))
        return
    yield _click(name)
    kind = "reply" if task == "reply" else "forward"
    yield _click(_find(view(), f"{kind} button", lambda e: f"email-{kind}" in e.classes.split()))
    page = view()
    if kind == "reply":
        yield _type(_find(page, "reply text", lambda e: e.id == "reply-text"), page.fields["message"])
    else:
        yield _type(_find(page, "recipient field", lambda e: "forward-sender" in e.classes.split()), page.fields["to"])
    yield _click(_find(view(), "send button", lambda e: e.id == f"send-{kind}"))


SOLVERS: dict[str, Solver] = {
    "click-button": click_button,
    "click-link": click_link,
    "click-checkboxes": click_checkboxes,
    "enter-text": enter_text,
    "focus-text": focus_text,
    "choose-list": choose_list,
    "login-user": login_user,
    "click-tab": click_tab,
    "use-autocomplete": use_autocomplete,
    "email-inbox": email_inbox,
}
"""MiniWoB task -> its solver."""
