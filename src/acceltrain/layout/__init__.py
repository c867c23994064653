"""A model's layout decided at its first fit: weighed by its step compiled here and laid out (autopilot.py), and
checked against one device (verify.py). Beside placement.py (the layout chosen at connect() and at build) and
planning/ (the same weighing for hardware you might rent); training/ is the loop that runs on the layout."""
