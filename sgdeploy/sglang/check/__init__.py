"""SGLang's own verdict on a launch, asked of the host's SGLang before anything stops.

`program.py` is the program sent to the host (standard library and the installed SGLang
only); `verdict.py` reads its answer and compares it with what the profile asked for and with
the offline rules. Both are pure from sgdeploy's side: the remote run is `HostSession`'s.
"""
