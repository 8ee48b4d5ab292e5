"""Who a caller is, as domain code sees it: a `Principal` and the projects it may read.

No grpc and no token handling here (that is `scrollback.server.auth`): this is
the value the server plumbing hands to the domain code, which takes it as an
explicit argument. `None` stands for "no auth configured": the embedded
loopback default, where everything is visible.
"""

from __future__ import annotations

from dataclasses import dataclass

ALL_PROJECTS = "*"
# The principal of every caller when auth is off. Token files need a non-empty
# name, so it can never be an authenticated principal's namespace.
ANONYMOUS = ""


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller and the project dirs it may read."""

    name: str
    projects: frozenset[str]

    def sees_project(self, project_dir: str) -> bool:
        """True if this principal may read transcripts of that project dir."""
        return ALL_PROJECTS in self.projects or project_dir in self.projects


def namespace(principal: Principal | None) -> str:
    """The namespace a caller's records live in (chat keys, accepted_by): its name, or ANONYMOUS."""
    return ANONYMOUS if principal is None else principal.name
