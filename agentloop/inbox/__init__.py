"""`agentloop inbox`: a small web app for the people in the loop, where the approvals, the
questions and the writes of unknown outcome that runs wait on are listed and answered.

It reads Temporal (visibility, the `status` query, `describe`) and acts only through the
messages the CLI sends; `app` holds the routes (handlers in `views` and `actions`), `access`
who may do what, `reading` what is read, `pages` and templates/ the HTML, `live` the run
pages' streams, `server` the serving."""

from agentloop.inbox.app import InboxOptions, inbox_app
from agentloop.inbox.server import InboxServer, InboxUnsafe, check_exposure

__all__ = ["InboxOptions", "InboxServer", "InboxUnsafe", "check_exposure", "inbox_app"]
