package db

import "syscall"

const sysFstatat = syscall.SYS_NEWFSTATAT
