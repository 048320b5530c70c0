# The compiled clock reads of this module (clock.pxd); it has no typed parts of its own.

from pytriton_core cimport clock
