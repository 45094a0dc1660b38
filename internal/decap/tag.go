package decap

import "github.com/xlbproject/xlb/internal/version"

// ProgramTags loads the decapsulator this binary embeds (nothing pinned or
// attached) and returns the kernel's tag of its program (version.Tags).
func ProgramTags() []version.Program { return version.Tags(loadDecap()) }
