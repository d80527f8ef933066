"""The hot path's money: holds, settlement, cool-downs, sizing, and the units money is counted in."""
