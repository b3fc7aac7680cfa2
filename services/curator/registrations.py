"""Where the curator reaches each party and compute node, and who may tell it.

A site's address comes from one of two places:

- **provisioned**: the curator's config (``parties``, ``compute_nodes``; written by ``mpdp provision``). Such an
  address is never changed by a registration: a site that registers the same address is answered as usual, one
  that registers another is refused ``WRONG_ROLE`` (its certificate may not change what the config says).
- **learned**: the site's first registration (RegisterParty, RegisterComputeNode), kept in ``state_dir`` with the
  SHA-256 fingerprint of the certificate's public key that made it. Only a certificate with that same key may
  change the address later (a restarted site re-registers with its own certificate, possibly at a new port); a
  second certificate minted under the same name is refused ``WRONG_ROLE`` and the address stays.

Only the federation's members may register at all (the gate refuses any other name ``WRONG_ROLE`` before the body
is read: :meth:`Registrations.members`). A learned entry written by an older version (an address without a key)
is pinned to the key of its next registration. To move a learned site to a new key (a re-issued certificate with a
new key pair), stop the curator and delete the site's entry from the file.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from mpdp.messages import common_pb2
from mpdp_services.common import errors
from mpdp_services.common.durable import PRIVATE, write_atomic

log = logging.getLogger("mpdp.curator")


class Registrations:
    """The addresses of one kind of site (parties or compute nodes) at the curator; see the module docstring.

    ``addresses`` is the one dict the curator's services read (shared by reference, updated in place)."""

    def __init__(self, kind: str, provisioned: dict[str, str], members: list[str], path: Path) -> None:
        self.kind = kind  # "party" or "compute node": for log lines and refusals
        self.provisioned = dict(provisioned)
        self._members = frozenset(members) | frozenset(provisioned)
        self.path = Path(path)
        self._keys: dict[str, str] = {}  # learned site → key fingerprint of the certificate that registered it
        self.addresses: dict[str, str] = {}
        self._load()

    def key(self, name: str) -> str | None:
        """The fingerprint of the certificate key ``name`` registered with (None: it never registered, or its address
        is provisioned)."""
        return self._keys.get(name)

    def members(self) -> frozenset[str]:
        """The names that may register: the configured members and every provisioned site."""
        return self._members

    def register(self, name: str, key: str, address: str) -> None:
        """Take a member's registration; errors.Refused(WRONG_ROLE) if its certificate may not set this address."""
        if name not in self._members:  # the gate refuses these already; a second check costs nothing
            raise errors.Refused(common_pb2.WRONG_ROLE, f"{errors.shown(name)} is not a member of this federation")
        fixed = self.provisioned.get(name)
        if fixed is not None:
            if address != fixed:
                raise errors.Refused(common_pb2.WRONG_ROLE, f"the curator's config fixes the address of {self.kind} {name}; "
                                     "registration cannot change it (fix advertise, or the curator's config)")
            return
        pinned = self._keys.get(name)
        if pinned is not None and pinned != key:
            raise errors.Refused(common_pb2.WRONG_ROLE, f"{self.kind} {name} registered with another certificate key; "
                                 "only that key may change its address")
        if pinned == key and self.addresses.get(name) == address:
            return
        self._keys[name] = key
        self.addresses[name] = address
        self._save()
        log.info("%s %s registered at %s", self.kind, name, address)

    # -- the file ----------------------------------------------------------------------------------------
    def _load(self) -> None:
        learned: dict[str, str] = {}
        if self.path.exists():
            try:
                raw = json.loads(self.path.read_text())
            except ValueError as e:
                raise ValueError(f"{self.path} is not valid JSON ({e}); restore it or delete it (its sites then register again)") from None
            for name, entry in (raw.items() if isinstance(raw, dict) else []):
                if isinstance(entry, str):  # an older version's entry: an address, no key yet
                    address, key = entry, ""
                elif isinstance(entry, dict) and isinstance(entry.get("address"), str) and isinstance(entry.get("key", ""), str):
                    address, key = entry["address"], entry.get("key", "")
                else:
                    continue
                if name in self.provisioned:
                    continue  # the config's address wins
                if name not in self._members:
                    log.warning("%s %s in %s is not a member of this federation: ignored", self.kind, errors.shown(name), self.path.name)
                    continue
                learned[name] = address
                if key:
                    self._keys[name] = key
        self.addresses.update(learned)
        self.addresses.update(self.provisioned)

    def _save(self) -> None:
        rows = {n: {"address": a, "key": self._keys.get(n, "")} for n, a in self.addresses.items() if n not in self.provisioned}
        write_atomic(self.path, json.dumps(rows, indent=2, sort_keys=True), PRIVATE)
