"""The rate-limit Lua scripts (data files; a package only so that ``pip install .`` ships them).

``limiter/scripts.py`` assembles each script as ``common.lua`` + one algorithm
(``sliding_window.lua``, ``token_bucket.lua``, ``fixed_window.lua``) + one operation
(``hit.lua``, ``refund.lua``, ``reserve.lua``, ``release.lua``).
"""
