"""A small inventory registry served by ``python -m agentkit_tools serve-mcp
tests.fakes.inventory_tools:registry`` in the MCP tests and run by the provider round-trips."""

from __future__ import annotations

from typing import Literal, TypedDict

from agentkit_tools import ToolError, ToolRegistry, tool


class Stock(TypedDict):
    """Stock of one SKU.

    Attributes:
        sku: The SKU code.
        on_hand: Units in the warehouse.
    """

    sku: str
    on_hand: int


_STOCK = {"main": {"SKU-1": 12, "SKU-2": 0}, "east": {"SKU-1": 4, "SKU-2": 7}}


@tool(read_only=True)
def get_stock(sku: str, warehouse: Literal["main", "east"] = "main") -> Stock:
    """Look up how many units of a SKU are in a warehouse.

    Args:
        sku: The SKU code, e.g. SKU-1.
        warehouse: Which warehouse to look in.
    """
    stock = _STOCK[warehouse]
    if sku not in stock:
        raise ToolError(f"unknown SKU {sku!r}; known SKUs: {', '.join(sorted(stock))}")
    return {"sku": sku, "on_hand": stock[sku]}


@tool(side_effecting=True, idempotent=True)
def set_price(sku: str, cents: int) -> str:
    """Set the shelf price of a SKU, replacing the current one.

    Args:
        sku: The SKU code, e.g. SKU-1.
        cents: The new price in cents (a positive integer).
    """
    return f"price of {sku} set to {cents} cents"


@tool(side_effecting=True)
def delete_sku(sku: str) -> str:
    """Remove a SKU from the catalogue for good; it cannot be undone.

    Args:
        sku: The SKU code to remove.
    """
    return f"{sku} deleted"


registry = ToolRegistry([get_stock, set_price, delete_sku])
