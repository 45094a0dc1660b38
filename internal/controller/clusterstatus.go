package controller

import "github.com/xlbproject/xlb/internal/api"

// SetClusterStatus gives the status its cluster part (connection sync and
// drift), read at every Status call.
func (a *API) SetClusterStatus(fn func() *api.ClusterInfo) { a.cluster.Store(&fn) }
