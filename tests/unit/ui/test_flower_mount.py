"""How the explorer goes into Flower: a link added to the navigation bar of the Flower that is installed, and
no explorer on an address other hosts reach when Flower asks no password."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path
from types import SimpleNamespace

import pytest

from fluksio.settings import Settings
from fluksio.ui.flower import _add_explorer, nav_with_link


def flower_templates() -> Path:
    spec = importlib.util.find_spec("flower")
    if spec is None or spec.origin is None:
        pytest.skip("flower is not installed (pip install 'fluksio[flower]')")
    return Path(spec.origin).parent / "templates"


def test_the_installed_flower_s_navbar_gets_one_link_in_its_list_of_pages() -> None:
    markup = (flower_templates() / "navbar.html").read_text()
    linked = nav_with_link(markup, "/fluksio/")
    assert linked is not None and linked.count('data-fluksio="explorer"') == 1
    pages = linked.split('<ul class="app-nav navbar-nav">', 1)[1].split("</ul>", 1)[0]
    assert 'href="/fluksio/"' in pages and "Broker" in pages  # beside Flower's own pages
    extra = [line for line in linked.splitlines() if line not in markup.splitlines()]
    assert len(extra) == 1 and 'href="/fluksio/"' in extra[0]  # one line added, nothing else changed
    assert len(linked.splitlines()) == len(markup.splitlines()) + 1


def test_a_navbar_without_the_list_is_left_alone() -> None:
    assert nav_with_link("<nav><ol></ol></nav>", "/fluksio/") is None


def test_no_explorer_on_an_open_address_without_a_password(caplog: pytest.LogCaptureFixture) -> None:
    added: list[object] = []
    app = SimpleNamespace(options=SimpleNamespace(url_prefix="", basic_auth=[], auth=None, address="0.0.0.0"),
                          add_handlers=lambda *args: added.append(args), settings={})
    with caplog.at_level(logging.WARNING, logger="fluksio.ui.flower"):
        _add_explorer(app, Settings(broker_url="redis://127.0.0.1:1/0"))
    assert added == [] and "template_loader" not in app.settings
    assert "the run explorer is not mounted" in caplog.text and "--basic-auth" in caplog.text
