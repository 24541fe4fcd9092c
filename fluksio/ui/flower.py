"""The explorer inside Flower (`fluksio flower`): its pages under ``/fluksio/`` and a link in Flower's navigation.

Flower is a Tornado application, so the explorer's routes are added to it (``add_handlers``; Tornado tries
them before Flower's own). Flower's navigation bar is a template with no place for another link: the
template is read through a loader that adds one ``<li>`` to its first list of links as it loads it. If a
Flower release changes the bar so that the list is not found, the bar is left as it is (with a warning) and
the explorer is still at ``/fluksio/``.
"""

from __future__ import annotations

import logging
import os
import re
from typing import Any

from tornado.template import Loader, Template

from fluksio.settings import Settings, is_loopback

log = logging.getLogger(__name__)

#: Where the explorer lives inside Flower (after Flower's own ``--url-prefix``).
MOUNT = "fluksio"
#: Flower's first list of navigation links (Workers, Tasks, Broker).
_NAV_LIST = re.compile(r'(<ul class="app-nav navbar-nav">)(.*?)(</ul>)', re.S)


def nav_with_link(markup: str, href: str) -> str | None:
    """Flower's navbar template with an item linking to the explorer, ``None`` if its link list is not there."""
    match = _NAV_LIST.search(markup)
    if match is None:
        return None
    item = (f'<li class="nav-item"><a class="nav-link" href="{href}" data-fluksio="explorer">Runs (fluksio)</a>'
            '</li>\n      ')
    return markup[:match.end(2)] + item + markup[match.end(2):]


class NavLinkLoader(Loader):
    """Flower's templates as they are, but ``navbar.html`` with a link to the explorer."""

    def __init__(self, root_directory: str, href: str, **kwargs: Any) -> None:
        super().__init__(root_directory, **kwargs)
        self.href = href

    def _create_template(self, name: str) -> Template:
        with open(os.path.join(self.root, name), "rb") as handle:
            markup = handle.read().decode("utf-8")
        if name == "navbar.html":
            linked = nav_with_link(markup, self.href)
            if linked is None:
                log.warning("Flower's navigation bar has no list of links where fluksio expects one; the run "
                            "explorer is still at %s", self.href)
            else:
                markup = linked
        return Template(markup, name=name, loader=self)


def mount_in_flower(settings: Settings) -> None:
    """Make the ``flower`` command build a Flower that also serves the explorer (call before it starts).

    Flower's command makes its application itself; its class is swapped for one that adds the explorer's
    routes once Flower has read its options (prefix, passwords, address). On an address other hosts
    reach, the explorer is mounted only behind Flower's basic auth or login, like ``fluksio ui``.
    """
    import flower.command  # type: ignore[import-untyped]
    from flower.app import Flower  # type: ignore[import-untyped]

    class FlowerWithExplorer(Flower):  # type: ignore[misc]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            _add_explorer(self, settings)

    flower.command.Flower = FlowerWithExplorer


def _add_explorer(app: Any, settings: Settings) -> None:
    from fluksio.client import connect
    from fluksio.ui.app import routes
    from fluksio.ui.context import Explorer

    options = app.options
    prefix = "/" + options.url_prefix.strip("/") if options.url_prefix else ""
    credentials = tuple(options.basic_auth or ())
    if not credentials and not options.auth and not is_loopback(options.address or ""):
        log.warning("the run explorer is not mounted: Flower listens on %s without --basic-auth, and the explorer "
                    "can cancel runs; give Flower --basic-auth to have it at %s/%s/", options.address or "*",
                    prefix, MOUNT)
        return
    explorer = Explorer(connect(settings), base=f"{prefix}/{MOUNT}", flower=prefix or "/", credentials=credentials,
                        authorize=_flower_login(app) if options.auth else None)
    app.add_handlers(r".*", routes(explorer))
    app.settings["template_loader"] = NavLinkLoader(app.settings["template_path"], f"{explorer.base}/")


def _flower_login(app: Any) -> Any:
    """With Flower's OAuth login on, a request must carry Flower's login cookie for an allowed user."""
    from flower.utils.authentication import authenticate  # type: ignore[import-untyped]

    def logged_in(handler: Any) -> bool:
        user = handler.get_secure_cookie("user")
        return bool(user) and bool(authenticate(app.options.auth, user.decode() if isinstance(user, bytes) else user))

    return logged_in
