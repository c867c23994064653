"""Where a model's weights go: chosen at connect() and at build (placement.py), and decided at its first fit, weighed
by its step compiled here and laid out (autopilot.py), checked against one device (verify.py). Over planning/ (the
same weighing for hardware you might rent) and beside training/, the loop that runs on the layout."""
