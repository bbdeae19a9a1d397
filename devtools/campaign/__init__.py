"""A fault campaign against a real Kafka cluster, checked in the spirit of Jepsen.

Run it with ``python -m devtools.campaign --faults 120`` (see ``--help`` and
docs/campaign.md). The checker (:func:`check` over a :class:`History`) is pure and can be
re-run on a finished run's directory with ``--check DIR``. ``--workload share`` runs a
share group (KIP-932) instead, judged by :func:`check_share`.
"""

from __future__ import annotations

from ._campaign import Campaign as Campaign
from ._campaign import CampaignError as CampaignError
from ._campaign import Settings as Settings
from ._checker import History as History
from ._checker import Report as Report
from ._checker import Violation as Violation
from ._checker import check as check
from ._load import load as load
from ._load import load_share as load_share
from ._share import ShareCampaign as ShareCampaign
from ._share_checker import ShareHistory as ShareHistory
from ._share_checker import ShareReport as ShareReport
from ._share_checker import check_share as check_share

__all__ = [
    "Campaign",
    "CampaignError",
    "History",
    "Report",
    "Settings",
    "ShareCampaign",
    "ShareHistory",
    "ShareReport",
    "Violation",
    "check",
    "check_share",
    "load",
    "load_share",
]
