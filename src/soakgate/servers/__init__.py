"""Managed server instances for campaigns: command templates, device pinning, start and stop."""

from soakgate.servers.command import Device, check_template, render_command
from soakgate.servers.instance import LaunchSpec, ServerInstance, probe_health
from soakgate.servers.ports import free_port

__all__ = [
    "Device",
    "LaunchSpec",
    "ServerInstance",
    "check_template",
    "free_port",
    "probe_health",
    "render_command",
]
