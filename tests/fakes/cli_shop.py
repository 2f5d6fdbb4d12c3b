"""Tools for the command-line tests, loaded by file path (``tests/fakes/cli_shop.py:shop``).

``Shop`` has methods decorated with ``@tool``: the instance ``shop`` is a target. Every side
effect appends one line to the file named by ``AGENTKIT_TEST_OUTBOX`` (when set), so a test can
see exactly what ran."""

from __future__ import annotations

import os

from agentkit_tools import ToolRegistry, tool


def _record(line: str) -> None:
    outbox = os.environ.get("AGENTKIT_TEST_OUTBOX")
    if outbox:
        with open(outbox, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


class Shop:
    """A shop whose public surface is three tools and one helper that is not a tool."""

    def __init__(self) -> None:
        self.prices = {"SKU-1": 1250}

    @tool(read_only=True)
    def price(self, sku: str) -> int:
        """Look up the shelf price of one SKU, in cents.

        Args:
            sku: The SKU code, e.g. SKU-1.
        """
        return self.prices[sku]

    @tool(side_effecting=True)
    def send_email(self, to: str, body: str) -> str:
        """Send an email to a customer; it cannot be unsent.

        Args:
            to: The customer's email address.
            body: The text of the email.
        """
        _record(f"email to {to}: {body}")
        return f"sent to {to}"

    @tool(side_effecting=True, requires_approval=True)
    def refund(self, order_id: str, cents: int) -> str:
        """Refund part of an order to the customer's original payment method.

        Args:
            order_id: The order, e.g. A-7.
            cents: How much to refund, in cents.
        """
        _record(f"refund {cents} on {order_id}")
        return f"refunded {cents} cents on {order_id}"

    def helper(self) -> str:
        return "not a tool"


shop = Shop()
registry = ToolRegistry.from_tools([shop.price, shop.send_email, shop.refund])
