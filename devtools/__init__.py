"""This repository's development tools, beside the library and not shipped with it: the
simulator's drivers for the recipes (``devtools.simulation``) and the fault campaign on real
brokers (``devtools.campaign``). Run them from a checkout."""
