#include "textflag.h"

// func cpuPause()
TEXT ·cpuPause(SB),NOSPLIT|NOFRAME,$0-0
	YIELD
	RET
