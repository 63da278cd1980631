"""Discovery protocols and stores: PING (multicast or static hosts) and cloud-store discovery
(one members file per coordinator, bootstrap files)."""
from .bootstrap import generate_bootstrap
from .members_file import Entry, MembersFile, ParseError
from .store import (MemoryStore, StoreClient, StoreConflict, StoreError, StoreUnavailable)
from .store_discovery import StoreDiscovery, StoreDiscoveryConfig

__all__ = ["Entry", "MembersFile", "MemoryStore", "ParseError", "StoreClient", "StoreConflict",
           "StoreDiscovery", "StoreDiscoveryConfig", "StoreError", "StoreUnavailable",
           "generate_bootstrap"]
