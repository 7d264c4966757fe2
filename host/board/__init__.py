"""Host (CPython): The board: serial link, ports, flashing, parity, predict, fleets, the virtual
board command, on-board training.
"""
