"""deltacast inside the frameworks and engines people run: one thin adapter per package over
deltacast.inference (the receive / verify / apply core) and deltacast's producers."""
