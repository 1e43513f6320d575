// The fiber switch of the emulated device (launch.cpp), x86-64 System V.
// emu_ctx_switch(void** save_sp, void* new_sp): push the callee-saved registers, MXCSR and the x87 control
// word, store the stack pointer in *save_sp, load new_sp, pop the same frame from it, return into it.
    .text
    .globl emu_ctx_switch
    .type emu_ctx_switch, @function
emu_ctx_switch:
    .cfi_startproc
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .cfi_endproc
    .size emu_ctx_switch, .-emu_ctx_switch

// A new fiber's first return lands here: r12 holds its argument, r13 its entry (which never returns).
    .globl emu_fiber_trampoline
    .type emu_fiber_trampoline, @function
emu_fiber_trampoline:
    .cfi_startproc
    .cfi_undefined rip
    movq %r12, %rdi
    callq *%r13
    ud2
    .cfi_endproc
    .size emu_fiber_trampoline, .-emu_fiber_trampoline
    .section .note.GNU-stack,"",@progbits
