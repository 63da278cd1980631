"""raygroups protocol stack: sans-IO layers, an asyncio runtime, a simulator."""
from .address import Address
from .config import StackConfig
from .errors import (ConfigError, GroupClosed, JoinRejected, JoinTimeout, MessageTooLarge,
                     NotConnected, NotPrimary, RaygroupsError)
from .message import Message
from .runtime.channel import Channel
from .view import Left, MergeView, View, ViewChange, ViewId

__all__ = ["Address", "Channel", "ConfigError", "GroupClosed", "JoinRejected", "JoinTimeout",
           "Left", "MergeView", "Message", "MessageTooLarge", "NotConnected", "NotPrimary",
           "RaygroupsError", "StackConfig", "View", "ViewChange", "ViewId"]
