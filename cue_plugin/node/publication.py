"""Frame 0's publication: its main address as a value (:class:`Publication`) and the job-token proof that it
comes from this job (:func:`proof`, :func:`signed_by`). How it is published and waited for is
``cue_plugin.node.rendezvous``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Publication:
    """Frame 0's main address.

    Attributes:
        host: host name or IP the other ranks connect to.
        port: TCP port of rank 0's store.
        attempt: identifies one run of frame 0 (file: ``host:pid:random``; cuebot: ``retry-N``).
        token: HMAC proof of the job token (see :func:`proof`), "" without a token.
        published_at: Unix time of publication [s] (for logs).
        pid: process id of frame 0's entry point (for logs).
        failed: "" for a usable publication; else frame 0's reason for failing the gang (a failure
            notice: nobody may join this attempt).
        generation: the node agent's gang generation this attempt hosts (1, 2, ...; 0 = not given), see
            ``cue_plugin.node.agent``.
        members: frame numbers invited to this generation, in rank order (empty = every frame of the layer;
            an elastic gang that shrank lists the frames it runs with, ``cue_plugin.node.membership``).
    """

    host: str
    port: int
    attempt: str
    token: str = ""
    published_at: float = 0.0
    pid: int = 0
    failed: str = ""
    generation: int = 0
    members: tuple[int, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["members"] = list(self.members)
        return out

    @classmethod
    def from_json(cls, data: Any) -> "Publication | None":
        """Parse a publication; None when it is not one (wrong shape or types)."""
        try:
            pub = cls(host=str(data["host"]), port=int(data["port"]), attempt=str(data["attempt"]),
                      token=str(data.get("token", "")), published_at=float(data.get("published_at", 0.0)),
                      pid=int(data.get("pid", 0)), failed=str(data.get("failed") or ""),
                      generation=int(data.get("generation", 0) or 0),
                      members=tuple(int(m) for m in data.get("members") or ()))
        except (KeyError, TypeError, ValueError):
            return None
        return pub if pub.host and 0 < pub.port < 65536 else None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def invites(self, frame: int) -> bool:
        """True when frame ``frame`` belongs to this generation (every frame when :attr:`members` is empty)."""
        return not self.members or frame in self.members

    def ranks_of(self, frame: int, ranks_per_frame: int) -> range:
        """The gang ranks frame ``frame`` runs in this generation: its position among :attr:`members` times
        ``ranks_per_frame`` (``frame * ranks_per_frame`` when every frame is a member)."""
        index = self.members.index(frame) if self.members else frame
        return range(index * ranks_per_frame, (index + 1) * ranks_per_frame)

    def world_size(self, full_world_size: int, ranks_per_frame: int) -> int:
        """Ranks in this generation: ``len(members) * ranks_per_frame``, or ``full_world_size`` for every frame."""
        return len(self.members) * ranks_per_frame if self.members else full_world_size


def proof(token: str | None, host: str, port: int, attempt: str, failed: str = "", generation: int = 0,
          members: tuple[int, ...] = ()) -> str:
    """HMAC-SHA256 of ``attempt:host:port`` (plus ``:gen:G:members:A,B`` when a generation is given, and
    ``:failed:REASON`` for a failure notice) under the job token ("" without a token)."""
    if not token:
        return ""
    text = f"cuetrain-rendezvous:{attempt}:{host}:{port}"
    if generation:
        text += f":gen:{generation}:members:{','.join(map(str, members))}"
    text += f":failed:{failed}" if failed else ""
    return hmac.new(token.encode(), text.encode(), hashlib.sha256).hexdigest()


def signed_by(pub: Publication, token: str | None) -> bool:
    """True when ``pub`` carries this job's token proof (always True without a token)."""
    if not token:
        return True
    return hmac.compare_digest(pub.token, proof(token, pub.host, pub.port, pub.attempt, pub.failed, pub.generation,
                                                pub.members))
