"""The admin UI in a real browser: headless Chromium (Debian's package) driven by Playwright
against pytest-django's live server on 127.0.0.1. Each step saves a screenshot under
test-output/<test name>/.

Without /usr/bin/chromium these tests are reported as skipped, with the reason; Playwright
cannot download a browser of its own here (`.ci/run` installs Debian's chromium)."""

import json
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

# Playwright's sync API runs an event loop in this thread; the ORM calls that the fixtures
# and steps make from the same thread are still plain synchronous calls.
os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"

import pytest  # noqa: E402
from django.apps import apps  # noqa: E402
from django.contrib.auth.models import Group, User  # noqa: E402
from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from access.actors import SYSTEM, Actor  # noqa: E402
from access.models import Role  # noqa: E402
from access.services import api_key_create  # noqa: E402
from adminui.groups import OPS, PROMPT_ENGINEERS, groups_sync  # noqa: E402
from registry.models import Bundle, BundleVersion, Label, VersionState  # noqa: E402
from registry.services import bundle_create, label_move, version_publish  # noqa: E402
from sessions_app.models import Session, SessionStatus  # noqa: E402
from sessions_app.services import session_start  # noqa: E402
from tests.conftest import content  # noqa: E402

CHROMIUM = Path("/usr/bin/chromium")
OUTPUT = Path(__file__).resolve().parents[2] / "test-output"
PASSWORD = "correct-horse-battery"
AGENT = Actor(name="agent:browser-test", role=Role.AGENT)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(
            f"{CHROMIUM} is missing: install Debian's chromium (apt-get install -y chromium) to run browser tests"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture
def base_url(live_server) -> str:
    # The live server binds "localhost" as IPv4; name the address itself.
    return live_server.url.replace("localhost", "127.0.0.1")


# Steps whose screenshots the README and docs/admin.md show: `make screenshots` (which sets
# UPDATE_SCREENSHOTS=1) copies them to docs/screenshots/ so the pictures follow the pages.
DOCS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"
DOCS_SHOTS = {
    "bundle-overview": "bundle.png",
    "json-error-next-to-tools": "new-version-error.png",
    "diff-v1-v2": "diff.png",
    "move-form-without-production": "move-form-prompt-engineer.png",
    "move-confirm": "move-confirm.png",
    "split-confirm": "split-confirm.png",
    "drain-dashboard": "drain.png",
    "history": "history.png",
    "editor-error-line": "editor.png",
    "bundle-390": "bundle-phone.png",
    "home-1280": "home.png",
    "check-against-v1": "check.png",
    "diff-390": "diff-phone.png",
}


class Shots:
    """Numbered full-page screenshots in test-output/<test name>/."""

    def __init__(self, name: str) -> None:
        self.dir = OUTPUT / name
        self.dir.mkdir(parents=True, exist_ok=True)
        for old in self.dir.glob("*.png"):
            old.unlink()
        self.n = 0

    def __call__(self, page: Page, step: str) -> None:
        self.n += 1
        # Scroll through once: code editors below the fold lay out their gutters only when seen.
        page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
        page.evaluate("new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
        page.evaluate("window.scrollTo(0, 0)")
        path = self.dir / f"{self.n:02d}-{step}.png"
        page.screenshot(path=str(path), full_page=True)
        if step in DOCS_SHOTS and os.environ.get("UPDATE_SCREENSHOTS") == "1":
            shutil.copyfile(path, DOCS / DOCS_SHOTS[step])


@pytest.fixture
def shot(request) -> Shots:
    return Shots(request.node.name)


@pytest.fixture
def refunds(transactional_db) -> Bundle:
    """refunds: v1 with tool process_refund, production -> v1."""
    groups_sync(apps=apps)  # earlier transactional tests flush the groups the migration made
    bundle = bundle_create(name="refunds", description="Refund agent", actor=SYSTEM)
    v1 = version_publish(bundle=bundle, content=content(), message="first version", actor=SYSTEM).version
    label_move(bundle=bundle, name="production", version=v1, actor=SYSTEM, reason="first release")
    return bundle


def person(username: str, group: str) -> User:
    user = User.objects.create_user(username=username, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    return user


def log_in(page: Page, base_url: str, username: str) -> None:
    page.goto(f"{base_url}/admin/login/?next=/admin/registry/bundle/")
    page.fill("#id_username", username)
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_have_text("Bundles")


def open_link(page: Page, name: str) -> None:
    page.get_by_role("link", name=name, exact=True).first.click()


def editor(page: Page, field: str):
    """The code editor over the textarea of `field` (editor.js)."""
    return page.locator(f".adminui-editor[data-field={field}]")


def set_editor(page: Page, field: str, text: str) -> None:
    """Replace the whole text of a field's code editor, as a person pasting would; the
    textarea underneath (the form field) follows."""
    content = editor(page, field).locator(".cm-content")
    content.click()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(text)
    expect(page.locator(f"#id_{field}")).to_have_value(text)


# The main pages (path, screenshot step, what shows the page is there), checked for fit at 1280
# and 390 px by the two tests below, on the data main_pages_data() adds.
MAIN_PAGES = [
    ("/admin/", "home", ".adminui-home-bundle"),  # the dashboard
    ("/admin/registry/bundle/", "bundles", "#content-main"),
    ("/admin/registry/bundle/refunds/versions/", "bundle", "#labels"),
    ("/admin/registry/bundle/refunds/versions/2/", "version", "#facts"),
    ("/admin/registry/bundle/refunds/diff/", "diff", "#prompt-diff"),  # v1 against v2; stacked at 390
    ("/admin/registry/bundle/refunds/versions/new/", "new-version", "#save-version"),
    ("/admin/registry/label/", "labels", "#labels"),
    ("/admin/registry/bundle/changes/", "changes", "#content-main"),
    ("/admin/sessions_app/session/", "sessions", "#sessions"),
    ("/admin/access/apikey/", "api-keys", "#result_list"),
    ("/admin/audit/auditevent/", "audit", "#result_list"),
]


def main_pages_data(refunds: Bundle) -> None:
    """What the main pages need to show more than headings: a second version with a long
    message, a session, an API key."""
    long_note = content("A second version with a much longer change message.", metadata={"owner": "payments-team"})
    version_publish(bundle=refunds, content=long_note, message="A rather long change message " * 4, actor=SYSTEM)
    session_start(bundle=refunds, label="production", actor=AGENT, external_id="conversation-with-a-long-id-0042")
    api_key_create(name="support-agent", role=Role.AGENT, actor=SYSTEM, scopes=["refunds"])


def ops_superuser(username: str) -> User:
    """An Ops member who is a superuser too: the API keys are a superuser's page."""
    user = person(username, OPS)
    user.is_superuser = True
    user.save(update_fields=["is_superuser"])
    return user


# Elements wider than their container: each element's border box against the padding box of the
# block that holds it (its parent, or the nearest ancestor that is not inline), and text spilling
# out of an element that does not clip it. Left out on purpose: what is out of flow (absolute,
# fixed: menus, visually hidden labels) and whatever sits inside a container that scrolls
# sideways (overflow-x auto or scroll: the code editors, a long diff line).
TOO_WIDE = """() => {
  const style = (e) => getComputedStyle(e);
  const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
    + (typeof e.className === 'string' && e.className.trim() ? '.' + e.className.trim().split(/\\s+/).join('.') : '');
  // Boxes whose width is not their own (clientWidth 0): the holder is further up.
  const PASSED = ['inline', 'contents', 'table-row', 'table-row-group', 'table-header-group', 'table-footer-group'];
  const found = [];
  for (const e of document.querySelectorAll('body *')) {
    const own = style(e);
    if (own.display === 'none' || own.position === 'absolute' || own.position === 'fixed') continue;
    let holder = e.parentElement;
    while (holder && holder !== document.body && PASSED.includes(style(holder).display))
      holder = holder.parentElement;
    let aside = false;  // inside a sideways scroller, or out of flow (a visually hidden thead)
    for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
      const s = style(a);
      if (['auto', 'scroll'].includes(s.overflowX) || ['absolute', 'fixed'].includes(s.position)) {
        aside = true;
        break;
      }
    }
    if (aside || !holder) continue;
    const box = e.getBoundingClientRect();
    if (box.width === 0 && box.height === 0) continue;
    const outer = holder.getBoundingClientRect();
    const left = outer.left + holder.clientLeft, right = left + holder.clientWidth;
    const spills = own.overflowX === 'visible' && own.display !== 'inline' && e.clientWidth > 0
      && e.scrollWidth > e.clientWidth + 1;
    if (box.right > right + 1 || box.left < left - 1 || spills)
      found.push(`${name(e)} in ${name(holder)}: ${Math.round(box.left)}..${Math.round(box.right)}`
        + ` in ${Math.round(left)}..${Math.round(right)}`
        + (spills ? `, content ${e.scrollWidth} > ${e.clientWidth}` : ''));
  }
  return found.slice(0, 12);
}"""


def too_wide(page: Page) -> list[str]:
    return page.evaluate(TOO_WIDE)


def test_a_prompt_engineer_writes_v2_with_a_tool_renamed_sees_the_diff_and_is_not_offered_production(
    page: Page, base_url: str, refunds: Bundle, shot: Shots
):
    person("pat", PROMPT_ENGINEERS)
    log_in(page, base_url, "pat")
    shot(page, "bundles")

    open_link(page, "refunds")
    expect(page.locator("#labels tr[data-label=production]")).to_contain_text("v1")
    shot(page, "bundle-overview")

    page.click("#write-version")
    prompt, tools = page.locator("#id_system_prompt"), page.locator("#id_tools")
    expect(prompt).to_have_value(re.compile("process_refund"))  # prefilled from v1
    shot(page, "new-version-form")

    # The JSON fields and the prompt are code editors over their textareas.
    expect(editor(page, "tools").locator(".cm-lineNumbers")).to_be_visible()
    expect(editor(page, "system_prompt").locator(".cm-lineNumbers")).to_be_visible()
    expect(tools).to_be_hidden()

    # A typo in the JSON: the error shows next to tools, and the typed text stays.
    renamed_tools = tools.input_value().replace("process_refund", "issue_refund")
    broken = renamed_tools.replace('"description"', '"description",', 1)
    set_editor(page, "tools", broken)
    set_editor(page, "system_prompt", prompt.input_value().replace("process_refund", "issue_refund"))
    page.fill("#id_message", "Rename the refund tool to issue_refund")
    page.click("#save-version")
    expect(page.locator("#id_tools_error")).to_contain_text("This is not valid JSON")
    expect(page.locator("#id_tools")).to_have_value(broken)
    expect(page.locator("#id_message")).to_have_value("Rename the refund tool to issue_refund")
    shot(page, "json-error-next-to-tools")

    # Valid JSON, but the prompt now names a tool the bundle does not have: refused, next to the prompt.
    original_tools = broken.replace('"description",', '"description"', 1).replace("issue_refund", "process_refund")
    set_editor(page, "tools", original_tools)
    page.click("#save-version")
    expect(page.locator("#id_system_prompt_error")).to_contain_text(
        "The prompt references `issue_refund` (line 1, column 30), but the bundle has no tool of that name "
        "(did you mean `process_refund`?)"
    )
    expect(page.locator("#id_tools_error")).to_have_count(0)
    # The prompt's editor marks line 1, and "Go to line 1" is offered next to the error.
    expect(editor(page, "system_prompt").locator(".adminui-error-line")).to_contain_text("issue_refund")
    expect(page.locator("#id_system_prompt_error button[data-line='1']")).to_have_count(1)
    shot(page, "prompt-names-a-missing-tool")
    assert BundleVersion.objects.filter(bundle=refunds).count() == 1

    set_editor(page, "tools", renamed_tools)
    page.click("#save-version")
    expect(page.locator("h1")).to_have_text("refunds v2")
    expect(page.locator("#facts")).to_contain_text("user:pat")
    expect(page.locator("#changes")).to_contain_text("Tool issue_refund added")
    expect(page.locator("#classification")).to_contain_text("Contract check: major change")
    shot(page, "version-2")
    assert BundleVersion.objects.get(bundle=refunds, number=2).author == "user:pat"

    page.click("#diff-previous")
    expect(page.locator("#tool-changes tr.tool-removed")).to_contain_text("process_refund")
    expect(page.locator("#tool-changes tr.tool-added")).to_contain_text("issue_refund")
    expect(page.locator("#prompt-diff .word-ins")).to_have_text("issue_refund")
    shot(page, "diff-v1-v2")

    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/")
    expect(page.locator("#labels tr[data-label=production] [data-action=move]")).to_have_count(0)
    page.click("#move-label")
    options = page.locator("#id_label option").all_inner_texts()
    assert "production" not in options
    expect(page.locator("#protected-note")).to_contain_text("production")
    shot(page, "move-form-without-production")

    # Typing the address by hand is refused too.
    page.goto(f"{base_url}/admin/registry/bundle/refunds/move/?label=production&version=2")
    expect(page.locator(".adminui-refusal")).to_contain_text("protected")
    shot(page, "production-refused")
    assert Label.objects.get(bundle=refunds, name="production").version.number == 1


def test_an_ops_user_moves_production_watches_v1_drain_rolls_back_and_finds_both_moves(
    page: Page, base_url: str, refunds: Bundle, shot: Shots
):
    renamed = content("You are a refund agent. Call `issue_refund` after checking the order.")
    renamed["tools"][0]["name"] = "issue_refund"
    version_publish(bundle=refunds, content=renamed, message="Rename the refund tool", actor=SYSTEM)
    session_start(bundle=refunds, actor=AGENT, external_id="chat-on-v1")  # pinned to v1 via production
    person("olga", OPS)
    log_in(page, base_url, "olga")

    open_link(page, "refunds")
    page.click("#labels tr[data-label=production] [data-action=move]")
    page.select_option("#id_version", "2")
    page.fill("#id_reason", "Ship the tool rename")
    shot(page, "move-form")
    page.click("#review")
    expect(page.locator("#becomes-live")).to_contain_text("v2 becomes live")
    expect(page.locator("#starts-draining")).to_contain_text("v1 starts draining")
    expect(page.locator("#starts-draining")).to_contain_text("1 active session")
    expect(page.locator("#compatibility")).to_contain_text(
        "production requires backward compatibility, and v2 is a major change against v1"
    )
    expect(page.locator("#compatibility")).to_contain_text("refused unless you tick")
    expect(page.locator("#classification li").first).to_contain_text("was renamed to `issue_refund`")
    expect(page.locator("#allow-breaking")).not_to_be_checked()
    assert Label.objects.get(bundle=refunds, name="production").version.number == 1  # nothing moved yet
    shot(page, "move-confirm")

    # The confirm button stays disabled until the breaking change is allowed (the server refuses
    # a move without the box anyway: tests/adminui/test_adminui_views.py).
    expect(page.locator("#confirm")).to_be_disabled()
    expect(page.locator("#confirm-needs-box")).to_be_visible()
    page.check("#allow-breaking")
    expect(page.locator("#confirm")).to_be_enabled()
    page.uncheck("#allow-breaking")
    expect(page.locator("#confirm")).to_be_disabled()
    page.check("#allow-breaking")
    shot(page, "move-confirm-allow-breaking")
    page.click("#confirm")
    expect(page.locator(".messagelist")).to_contain_text("Moved production: it now targets v2")
    expect(page.locator("#versions tr[data-version='1']")).to_contain_text("draining")
    shot(page, "moved")

    page.goto(f"{base_url}/admin/registry/bundle/drain/?bundle=refunds")
    v1_row = page.locator("tr[data-version='1']")
    expect(v1_row).to_have_attribute("data-state", "draining")
    expect(v1_row.locator("td.sessions")).to_have_text("1")
    shot(page, "drain-dashboard")
    # The page refreshes itself: a second session pinned to v1 shows up without a reload.
    v1 = BundleVersion.objects.get(bundle=refunds, number=1)
    session_start(bundle=refunds, actor=AGENT, version=v1)
    expect(page.locator("tr[data-version='1'] td.sessions")).to_have_text("2", timeout=10_000)
    shot(page, "drain-dashboard-refreshed")

    # Ops look at the sessions behind that number and end one of them.
    page.locator("tr[data-version='1'] td.sessions a").click()
    expect(page.locator("#sessions tbody tr")).to_have_count(2)
    page.fill("#id_q", "chat-on-v1")
    page.click("#session-search input[type=submit]")
    expect(page.locator("#sessions tbody tr")).to_have_count(1)
    shot(page, "sessions-search")
    page.locator("#sessions tbody tr a").first.click()
    expect(page.locator("#facts")).to_contain_text("v1")
    expect(page.locator("#facts")).to_contain_text("chat-on-v1")
    shot(page, "session-detail")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#end-session")
    expect(page.locator("#facts")).to_contain_text("ended")
    assert Session.objects.get(external_id="chat-on-v1").status == SessionStatus.ENDED

    open_link(page, "refunds")
    page.click("#labels tr[data-label=production] [data-action=rollback]")
    expect(page.locator("#id_version")).to_have_value("1")
    page.fill("#id_reason", "v2 confuses the model")
    page.click("#review")
    expect(page.locator("#becomes-live")).to_contain_text("v1 becomes live")
    expect(page.locator("#starts-draining")).to_contain_text("drained at once")
    expect(page.locator("#rollback-exempt")).to_contain_text("The compatibility check does not apply to this move.")
    expect(page.locator("#allow-breaking")).to_have_count(0)
    shot(page, "rollback-confirm")
    page.click("#confirm")
    expect(page.locator("#labels tr[data-label=production]")).to_contain_text("v1")
    shot(page, "rolled-back")
    assert BundleVersion.objects.get(bundle=refunds, number=1).state == VersionState.LIVE

    open_link(page, "History")
    moves = page.locator("#moves tbody tr")
    expect(moves).to_have_count(3)
    expect(moves.nth(0)).to_contain_text("v2 confuses the model")
    expect(moves.nth(0)).to_contain_text("user:olga")
    expect(moves.nth(0).locator("td.note")).to_have_text(
        "compatibility check not applied: version 1 was this label's target before (rollback)"
    )
    expect(moves.nth(1)).to_contain_text("Ship the tool rename")
    expect(moves.nth(1)).to_contain_text("user:olga")
    expect(moves.nth(1).locator("td.note")).to_have_text(
        "breaking change allowed (allow_breaking): 1 major change(s) against version 1"
    )
    shot(page, "history")
    moves.nth(1).locator("a.diff-link").click()
    expect(page.locator("h1")).to_have_text("refunds: v1 → v2")
    expect(page.locator("#tool-changes")).to_contain_text("issue_refund")
    shot(page, "diff-from-history")


def test_an_admin_adds_a_teammate_to_a_group_in_the_admin_and_the_teammate_signs_in(
    page: Page, base_url: str, refunds: Bundle, shot: Shots
):
    """The README's steps, as an admin would click them: add a user, put them in "Prompt
    engineers", save; Staff status is never ticked."""
    User.objects.create_superuser(username="root", password=PASSWORD, email="")
    log_in(page, base_url, "root")
    page.goto(f"{base_url}/admin/auth/user/add/")
    page.fill("#id_username", "priya")
    page.fill("#id_password1", "a-long-teammate-password")
    page.fill("#id_password2", "a-long-teammate-password")
    shot(page, "add-user")
    expect(page.get_by_text("Staff status")).to_have_count(0)  # roles, not Django's flags
    page.click("input[name=_continue]")
    page.get_by_label(PROMPT_ENGINEERS).check()
    shot(page, "user-in-group")
    page.click("input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("was changed successfully")
    priya = User.objects.get(username="priya")
    assert not priya.is_staff and list(priya.groups.values_list("name", flat=True)) == [PROMPT_ENGINEERS]

    page.context.clear_cookies()
    page.goto(f"{base_url}/admin/login/?next=/admin/registry/bundle/")
    page.fill("#id_username", "priya")
    page.fill("#id_password", "a-long-teammate-password")
    page.click("input[type=submit]")
    expect(page.locator("h1")).to_have_text("Bundles")
    expect(page.locator(".adminui-role")).to_have_text("role: publisher")
    shot(page, "teammate-signed-in")
    open_link(page, "refunds")
    expect(page.locator("#write-version")).to_be_visible()


def active_line_number(page: Page, field: str) -> str:
    return editor(page, field).locator(".cm-activeLineGutter").first.inner_text()


def test_the_code_editor_highlights_json_matches_brackets_jumps_to_errors_and_guards_unsaved_edits(
    page: Page, base_url: str, refunds: Bundle, shot: Shots
):
    person("pat", PROMPT_ENGINEERS)
    log_in(page, base_url, "pat")
    dialogs: list[str] = []

    def on_dialog(dialog) -> None:
        dialogs.append(dialog.type)
        dialog.accept()

    page.on("dialog", on_dialog)
    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/new/")
    tools = editor(page, "tools")
    expect(tools.locator(".cm-lineNumbers .cm-gutterElement", has_text="12")).to_have_count(1)

    # JSON syntax highlighting: a property name and a string value are coloured differently
    # from each other and from the punctuation.
    colours = page.evaluate(
        """() => {
        const line = [...document.querySelectorAll('.adminui-editor[data-field=tools] .cm-line')]
          .find(l => l.textContent.includes('"name"'));
        const colour = (text) => {
          const span = [...line.querySelectorAll('span')].find(s => s.textContent === text);
          return span ? getComputedStyle(span).color : null;
        };
        return {key: colour('"name"'), value: colour('"process_refund"'), text: getComputedStyle(line).color};
    }"""
    )
    assert colours["key"] and colours["value"], colours
    assert len({colours["key"], colours["value"], colours["text"]}) == 3, colours

    # Bracket matching: the cursor next to the opening [ marks it and its partner.
    tools.locator(".cm-content").click()
    page.keyboard.press("Control+Home")
    expect(tools.locator(".cm-matchingBracket")).to_have_count(2)
    shot(page, "editor")

    # A schema error reported by path: after the failed save, focus is on the error summary,
    # the line of the path is marked, and "Go to line" puts the cursor there.
    typed = page.locator("#id_tools").input_value().replace('"type": "number"', '"type": "strnig"')
    set_editor(page, "tools", typed)
    page.click("#save-version")
    expect(page.locator("#id_tools_error")).to_contain_text("tools[0].input_schema.properties.amount.type:")
    assert page.evaluate("document.activeElement.id") == "error-summary"
    bad_line = next(n for n, line in enumerate(typed.splitlines(), 1) if "strnig" in line)
    expect(tools.locator(".adminui-error-line")).to_have_count(1)
    expect(tools.locator(".adminui-error-line")).to_contain_text("strnig")
    page.click(f"#id_tools_error button[data-line='{bad_line}']")
    expect(tools.locator(".cm-editor.cm-focused")).to_have_count(1)
    assert active_line_number(page, "tools") == str(bad_line)
    shot(page, "editor-error-line")

    # A JSON syntax error reported by line and column: the same.
    broken = typed.replace('"strnig"', '"number"').replace('"required": [', '"required": [,', 1)
    set_editor(page, "tools", broken)
    page.click("#save-version")
    expect(page.locator("#id_tools_error")).to_contain_text("This is not valid JSON")
    syntax_line = next(n for n, line in enumerate(broken.splitlines(), 1) if "[," in line)
    expect(page.locator(f"#id_tools_error button[data-line='{syntax_line}']")).to_have_count(1)
    expect(tools.locator(".adminui-error-line")).to_contain_text('"required": [,')

    # Leaving with unsaved edits asks first (the page came back with errors: unsaved too)...
    assert dialogs == []
    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/")
    assert dialogs == ["beforeunload"]
    expect(page.locator("h1")).to_have_text("Bundle refunds")

    # ...an untouched form does not...
    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/new/")
    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/")
    assert dialogs == ["beforeunload"]

    # ...and a successful save does not either.
    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/new/")
    prompt = page.locator("#id_system_prompt").input_value()
    set_editor(page, "system_prompt", prompt + "\nBe brief.")
    page.fill("#id_message", "Be brief")
    page.click("#save-version")
    expect(page.locator("h1")).to_have_text("refunds v2")
    assert dialogs == ["beforeunload"]


def test_the_main_pages_fit_a_390_px_phone_without_sideways_scrolling(
    browser: Browser, base_url: str, refunds: Bundle, shot: Shots
):
    main_pages_data(refunds)
    ops_superuser("olga")
    context = browser.new_context(viewport={"width": 390, "height": 844}, device_scale_factor=2, is_mobile=True)
    page = context.new_page()
    try:
        log_in(page, base_url, "olga")
        for path, step, shown in MAIN_PAGES:
            page.goto(base_url + path)
            expect(page.locator(shown).first).to_be_visible()
            widths = page.evaluate(
                "() => ({doc: document.documentElement.scrollWidth, body: document.body.scrollWidth,"
                " view: window.innerWidth})"
            )
            shot(page, f"{step}-390")
            assert widths["view"] == 390, (path, widths)
            assert widths["doc"] <= 390 and widths["body"] <= 390, (path, widths)
            wide = too_wide(page)
            assert not wide, (path, wide)
    finally:
        context.close()


def test_an_ops_user_ramps_production_to_ten_percent(page: Page, base_url: str, refunds: Bundle, shot: Shots):
    version_publish(bundle=refunds, content=content("Version two, same tools."), message="v2", actor=SYSTEM)
    person("olga", OPS)
    log_in(page, base_url, "olga")
    page.goto(f"{base_url}/admin/registry/bundle/refunds/move/?label=production")
    page.select_option("#id_split_version_1", "1")
    page.fill("#id_split_weight_1", "90")
    page.select_option("#id_split_version_2", "2")
    page.fill("#id_split_weight_2", "20")
    page.fill("#id_reason", "Ramp v2 to 10%")
    page.click("#review")
    expect(page.locator("#id_targets_error")).to_have_text("The weights must sum to 100. These add up to 110.")
    page.fill("#id_split_weight_2", "10")
    shot(page, "split-form")
    page.click("#review")
    expect(page.locator("#from-to")).to_contain_text("production changes from v1 to v1 90% · v2 10%.")
    expect(page.locator("#compatibility")).to_contain_text("v2 is a patch change against v1")
    shot(page, "split-confirm")
    page.click("#confirm")
    expect(page.locator(".messagelist")).to_contain_text("Moved production: it now targets v1 90% · v2 10%.")
    expect(page.locator("#labels tr[data-label=production]")).to_contain_text("v1 90% · v2 10%")
    label = Label.objects.get(bundle=refunds, name="production")
    assert [(t["number"], t["weight"]) for t in label.targets] == [(1, 90), (2, 10)]


def test_at_1280_px_the_pages_fit_and_check_shows_the_verdict_before_saving(
    page: Page, base_url: str, refunds: Bundle, shot: Shots
):
    """ "Check against v1" answers on the form, nothing saved; no sidebar beside any page, custom
    or stock, and no element wider than its container: the tables fit, "Roll back" is whole, the
    header does not wrap; the home page is the dashboard."""
    ops_superuser("olga")
    page.set_viewport_size({"width": 1280, "height": 900})
    log_in(page, base_url, "olga")
    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/new/")
    set_editor(page, "tools", "[]")
    set_editor(page, "system_prompt", "You are a refund agent.")
    page.click("#check-version")
    expect(page.locator("#verdict")).to_contain_text("Contract check against v1: major change")
    expect(page.locator("#verdict-labels")).to_contain_text("refused without allow_breaking")
    expect(page.locator("#verdict-prefix")).to_contain_text("bytes")
    shot(page, "check-against-v1")
    assert BundleVersion.objects.filter(bundle=refunds).count() == 1

    main_pages_data(refunds)
    for path, step, shown in MAIN_PAGES:
        page.goto(base_url + path)
        expect(page.locator(shown).first).to_be_visible()
        expect(page.locator("#nav-sidebar")).to_have_count(0)
        shot(page, f"{step}-1280")
        wide = page.evaluate(
            "() => [...document.querySelectorAll('#content-main *')].filter(e => e.getBoundingClientRect().right"
            " > document.documentElement.clientWidth + 1).map(e => e.tagName + '.' + e.className).slice(0, 5)"
        )
        assert not wide, (path, wide)
        wide = too_wide(page)
        assert not wide, (path, wide)
        # The header does not wrap: the user tools are one line, the main pages one row.
        header = page.evaluate(
            """() => {
            const tools = document.querySelector('#user-tools');
            const lines = (e) => {  // lines of text: the tops of its text, 8 px apart or more
              const walk = document.createTreeWalker(e, NodeFilter.SHOW_TEXT); const tops = [];
              for (let n = walk.nextNode(); n; n = walk.nextNode()) { const r = document.createRange();
                r.selectNodeContents(n); for (const b of r.getClientRects()) if (b.width > 0) tops.push(b.top); }
              tops.sort((a, b) => a - b);
              return tops.filter((t, i) => i === 0 || t - tops[i - 1] >= 8).length; };
            return {tools: lines(tools), nav: new Set([...document.querySelectorAll('.adminui-nav a')]
              .map(a => Math.round(a.getBoundingClientRect().top))).size,
              name: lines(document.querySelector('#site-name'))};
        }"""
        )
        assert header == {"tools": 1, "nav": 1, "name": 1}, (path, header)


def test_tools_and_skills_are_edited_as_cards_that_write_the_json_and_boxes_insert_examples(
    page: Page, base_url: str, refunds: Bundle, shot: Shots
):
    """The cards write the JSON the box holds (and its code editor shows), keeping the keys they
    do not show and the order typed; "Insert example" fills an empty box; saving publishes it."""
    person("pat", PROMPT_ENGINEERS)
    log_in(page, base_url, "pat")
    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/new/")
    tools = page.locator("#tools-cards")
    expect(tools.locator("fieldset")).to_have_count(1)
    expect(tools.locator("[data-card-field=name]")).to_have_value("process_refund")
    expect(tools.locator("tbody tr")).to_have_count(2)  # amount, order_id
    before = json.loads(page.locator("#id_tools").input_value())

    tools.locator("[data-card-field=description]").fill("Refund a paid order, in full or in part.")
    tools.locator("[data-card-action=add-param]").click()
    new_row = tools.locator("tbody tr").nth(2)
    new_row.locator("[data-card-field=param-name]").fill("reason")
    new_row.locator("[data-card-field=param-required]").check()
    new_row.locator("[data-card-field=param-description]").fill("Why the refund is made.")
    tools.locator("tbody tr").nth(0).locator("[data-card-field=param-type]").select_option("integer")
    after = json.loads(page.locator("#id_tools").input_value())
    assert list(after[0]) == list(before[0])  # the tool's keys in the order they were
    assert after[0]["description"] == "Refund a paid order, in full or in part."
    schema = after[0]["input_schema"]
    assert list(schema["properties"]) == ["amount", "order_id", "reason"]
    assert schema["properties"]["amount"]["type"] == "integer"
    assert schema["properties"]["reason"] == {"type": "string", "description": "Why the refund is made."}
    assert schema["required"] == [*before[0]["input_schema"]["required"], "reason"]
    expect(editor(page, "tools").locator(".cm-content")).to_contain_text("in full or in part")  # the editor follows

    # Typing in the JSON redraws the cards.
    set_editor(page, "tools", json.dumps(after[:1] + [{"name": "ping", "description": "", "input_schema": {}}]))
    expect(tools.locator("fieldset")).to_have_count(2)
    expect(tools.locator("fieldset").nth(1).locator("[data-card-field=name]")).to_have_value("ping")
    tools.locator("fieldset").nth(1).get_by_role("button", name="Remove this tool").click()
    expect(tools.locator("fieldset")).to_have_count(1)

    skills = page.locator("#skills-cards")
    expect(skills.locator("fieldset")).to_have_count(0)
    page.locator("#row-skills [data-card-action=add]").click()
    card = skills.locator("fieldset").first
    card.locator("[data-card-field=name]").fill("refund_status")
    card.locator("[data-card-field=summary]").fill("Use when the customer asks where a refund is")
    card.locator("[data-card-field=keywords]").fill("refund status, where is my money, refund late")
    card.locator("[data-card-field=examples]").fill("Where is my refund?\nMy refund has not arrived")
    card.locator("[data-card-field=level]").select_option("L2")
    card.locator("[data-card-field=description]").fill("Say where the refund is and when it lands.")
    card.locator("[data-card-field=category]").fill("refunds")
    card.locator("[data-card-field=triggers]").fill("refund (status|late)\n\\bRF-[0-9]+\\b")
    card.locator("[data-card-field=exclusive_group]").fill("refund_questions")
    written = json.loads(page.locator("#id_skills").input_value())
    assert written[0]["keywords"] == ["refund status", "where is my money", "refund late"]
    assert written[0]["examples"] == ["Where is my refund?", "My refund has not arrived"]
    assert written[0]["description"] == "Say where the refund is and when it lands."
    assert written[0]["category"] == "refunds"
    assert written[0]["triggers"] == ["refund (status|late)", "\\bRF-[0-9]+\\b"]
    assert written[0]["exclusive_group"] == "refund_questions"
    # The example's keys where they were; the optional ones it lacked come after them.
    assert list(written[0]) == [
        "name",
        "summary",
        "description",
        "keywords",
        "category",
        "examples",
        "level",
        "triggers",
        "exclusive_group",
    ]
    card.locator("[data-card-field=exclusive_group]").fill("")  # optional: emptied, the key goes
    assert "exclusive_group" not in json.loads(page.locator("#id_skills").input_value())[0]
    expect(editor(page, "skills").locator(".cm-content")).to_contain_text("RF-[0-9]+")

    expect(page.locator("#id_output_schema")).to_have_value("null")
    page.click("#output_schema-example")
    assert json.loads(page.locator("#id_output_schema").input_value())["required"] == ["answer"]
    page.click("#guardrails-example")  # {}: the example, naming the first tool
    assert json.loads(page.locator("#id_guardrails").input_value())["rules"][0]["tool"] == "process_refund"
    page.click("#guardrails-example")  # not empty now: left alone, and said
    expect(page.locator("#row-guardrails .adminui-example")).to_contain_text("not empty")
    shot(page, "cards")

    page.fill("#id_message", "Refund reasons, a refund-status skill, a typed answer")
    page.click("#save-version")
    expect(page.locator("h1")).to_have_text("refunds v2")
    saved = BundleVersion.objects.get(bundle=refunds, number=2)
    doc = json.loads(bytes(saved.canonical))
    assert doc["tools"][0]["input_schema"]["required"][-1] == "reason"
    assert doc["skills"][0]["name"] == "refund_status"
    assert doc["skills"][0]["triggers"] == ["refund (status|late)", "\\bRF-[0-9]+\\b"]
    assert doc["output_schema"]["required"] == ["answer"]
    assert doc["guardrails"]["rules"][0] == {
        "tool": "process_refund",
        "effect": "confirm",
        "reason": "Reads customer data.",
    }


def test_the_json_boxes_complete_json_schema_keywords(page: Page, base_url: str, refunds: Bundle):
    """Typing a key in output_schema offers the JSON Schema keywords; in guardrails, its effects."""
    person("pat", PROMPT_ENGINEERS)
    log_in(page, base_url, "pat")
    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/new/")
    set_editor(page, "output_schema", "{}")
    page.keyboard.press("ArrowLeft")
    page.keyboard.type('"addi')
    menu = page.locator(".cm-tooltip-autocomplete")
    expect(menu).to_contain_text("additionalProperties")
    expect(menu).not_to_contain_text("confirm")  # not a schema word
    set_editor(page, "guardrails", '{"default": }')
    page.keyboard.press("ArrowLeft")
    page.keyboard.type('"con')
    expect(menu).to_contain_text("confirm")


def every_admin_page_data(refunds: Bundle) -> list[str]:
    """A bundle with something on every admin page (a breaking v2, a v3 with skills, a session,
    a label history, a knowledge pack with a file, a teammate); returns the pages' paths."""
    import copy

    from knowledge import services as knowledge
    from tests.adminui.test_adminui_workbench import SKILLS

    renamed = content("You are a refund agent. Call `issue_refund` after checking the order.")
    renamed["tools"][0]["name"] = "issue_refund"
    version_publish(bundle=refunds, content=renamed, message="Rename the refund tool " * 6, actor=SYSTEM)
    skilled = content("Refunds, with skills.", skills=copy.deepcopy(SKILLS))
    version_publish(bundle=refunds, content=skilled, message="Skills", actor=SYSTEM)
    for number in (1, 3):  # staging has a version to roll back to
        label_move(
            bundle=refunds, name="staging", version=refunds.versions.get(number=number), actor=SYSTEM, reason="try"
        )
    session, *_ = session_start(bundle=refunds, label="production", actor=AGENT, external_id="conversation-0042-" * 3)
    api_key_create(name="support-agent", role=Role.AGENT, actor=SYSTEM, scopes=["refunds"])
    pack = knowledge.pack_create(name="ops", description="Ops notes", actor=SYSTEM)
    knowledge.file_put(pack=pack, path="sre/DUTY.md", content="Page the on-call. " * 40, actor=SYSTEM)
    teammate = person("pat", PROMPT_ENGINEERS)
    bundle_pages = "/admin/registry/bundle/refunds"
    return [
        *(path for path, _, _ in MAIN_PAGES),
        "/admin/registry/bundle/add/",
        f"{bundle_pages}/edit/",
        f"{bundle_pages}/versions/1/",
        f"{bundle_pages}/versions/3/",  # the skills table
        f"{bundle_pages}/versions/1/revoke/",
        f"{bundle_pages}/versions/new/?from=3",
        f"{bundle_pages}/diff/?old=1&new=3",
        f"{bundle_pages}/move/",
        f"{bundle_pages}/move/?label=production",
        f"{bundle_pages}/labels/production/policy/",
        f"{bundle_pages}/labels/staging/rollback/",
        f"{bundle_pages}/history/",
        "/admin/registry/bundle/drain/",
        "/admin/registry/bundleversion/",
        f"/admin/sessions_app/session/{session.pk}/detail/",
        "/admin/knowledge/pack/",
        f"/admin/knowledge/pack/{pack.pk}/change/",
        "/admin/auth/user/",
        "/admin/auth/user/add/",
        f"/admin/auth/user/{teammate.pk}/change/",
        "/admin/auth/group/",
        "/admin/password_change/",
    ]


# Whether the page scrolls sideways: the scrolling element's width against the viewport's, and
# for the failure message the outermost elements that reach past the width the page should have.
SIDEWAYS = """(width) => {
  const name = (e) => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '')
    + (typeof e.className === 'string' && e.className.trim() ? '.' + e.className.trim().split(/\\s+/).join('.') : '');
  const past = [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > width + 1);
  const outermost = past.filter(e => !past.includes(e.parentElement)).slice(0, 4);
  return {scroll: document.scrollingElement.scrollWidth, view: window.innerWidth,
          past: outermost.map(e => name(e) + ' ' + Math.round(e.getBoundingClientRect().right))};
}"""


@pytest.mark.parametrize("width", [390, 1280])
def test_no_admin_page_scrolls_sideways_at_390_or_1280_px(
    browser: Browser, base_url: str, refunds: Bundle, shot: Shots, width: int
):
    """Issue 35: at 390 px the version page (the skills table), the move form, the history, the
    drain dashboard and the breaking-move confirmation scrolled sideways. Every admin page, and
    the confirmation of a breaking move, fit the screen; a wide table scrolls inside its box."""
    pages = every_admin_page_data(refunds)
    ops_superuser("olga")
    phone = {"device_scale_factor": 2, "is_mobile": True} if width == 390 else {}
    context = browser.new_context(viewport={"width": width, "height": 844}, **phone)
    page = context.new_page()
    context.set_default_timeout(15_000)
    try:
        log_in(page, base_url, "olga")
        found = {}
        for path in pages:
            response = page.goto(base_url + path)
            assert response is not None and response.status == 200, path
            widths = page.evaluate(SIDEWAYS, width)
            # A phone zooms out to show a page wider than itself: innerWidth grows with it.
            if widths["scroll"] > widths["view"] or widths["view"] != width:
                found[path] = widths
                shot(page, re.sub(r"\W+", "-", path).strip("-") + f"-{width}")
        # The breaking move's confirmation (a POST's answer): production from v1 to v2, which
        # renames the tool.
        page.goto(f"{base_url}/admin/registry/bundle/refunds/move/?label=production")
        page.select_option("#id_version", "2")
        page.fill("#id_reason", "Ship the rename")
        with page.expect_navigation():
            page.locator("#review").evaluate("button => button.click()")
        expect(page.locator("#confirm")).to_have_count(1)
        widths = page.evaluate(SIDEWAYS, width)
        if widths["scroll"] > widths["view"] or widths["view"] != width:
            found["breaking-move confirm"] = widths
            shot(page, f"breaking-confirm-{width}")
        assert not found, json.dumps(found)
    finally:
        context.close()


def test_add_a_tool_or_a_skill_inserts_a_blank_card_and_the_example_is_behind_its_button(
    page: Page, base_url: str, refunds: Bundle
):
    """Issue 35: "Add a tool" on an empty list inserted the filled `lookup_order` example, which a
    hurried author published as it was. A blank card now; the example only on request."""
    person("pat", PROMPT_ENGINEERS)
    log_in(page, base_url, "pat")
    page.goto(f"{base_url}/admin/registry/bundle/refunds/versions/new/")
    set_editor(page, "tools", "[]")
    tools = page.locator("#tools-cards")
    expect(tools.locator("fieldset")).to_have_count(0)
    page.locator("#row-tools [data-card-action=add]").click()
    expect(tools.locator("[data-card-field=name]")).to_have_value("")
    assert json.loads(page.locator("#id_tools").input_value()) == [
        {"name": "", "description": "", "input_schema": {"type": "object", "properties": {}}}
    ]
    page.locator("#row-skills [data-card-action=add]").click()
    expect(page.locator("#skills-cards [data-card-field=name]")).to_have_value("")
    skill = json.loads(page.locator("#id_skills").input_value())[0]
    assert skill["name"] == "" and skill["keywords"] == [] and skill["examples"] == []
    assert "lookup_order" not in page.locator("#id_tools").input_value()
    page.click("#tools-example")  # the example, when asked for
    assert [t["name"] for t in json.loads(page.locator("#id_tools").input_value())] == ["", "lookup_order"]
