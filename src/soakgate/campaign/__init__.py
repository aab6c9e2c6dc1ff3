"""Campaigns: a matrix of server configurations soaked block by block, guarded and resumable."""

from soakgate.campaign.blocks import Block, plan_blocks
from soakgate.campaign.model import (
    Campaign,
    ConfigEntry,
    LoadSettings,
    ServerTemplate,
    load_campaign,
)
from soakgate.campaign.runner import CampaignResult, run_campaign

__all__ = [
    "Block",
    "Campaign",
    "CampaignResult",
    "ConfigEntry",
    "LoadSettings",
    "ServerTemplate",
    "load_campaign",
    "plan_blocks",
    "run_campaign",
]
