"""The CLI's verbs, one module each (train, run, launch, bench, doctor, report) and what they share
(config files, output folders). `acceltrain.cli` is the thin argparse layer over them; a verb may
start a framework, so each is imported only when its verb runs."""
