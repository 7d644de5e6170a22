package role

// units are the parts of one run of the role, each owning one concern
// and handed only what it needs of the Node: the phase lists (genesis.go,
// master.go, worker.go) read as those parts' steps. The units that keep
// state during a run (the control plane's etcd peers, the join's
// answering masters and beacon) are shared by pointer, so every phase of
// the run sees the same, as does the master join a genesis node is sent
// to when its cluster exists.
type units struct {
	env     nodeEnv
	survey  surveyor
	cni     *podNetwork
	files   nodeFiles
	plane   *controlPlane
	join    *masterJoin
	master  asMaster
	kubelet asKubelet
}

// units wires this run's units from the Node's fields, once: Run clears
// them when it loads the node file.
func (n *Node) units() *units {
	if n.u != nil {
		return n.u
	}
	env := nodeEnv{root: n.Root, file: n.file, cat: n.cat, log: n.Log}
	api := clients{env: env, apiAt: n.APIAt}
	port := etcdPort(n.EtcdPort)
	local := nodeLocal{sys: n.Sys, log: n.Log}
	cni := &podNetwork{env: env, api: api, wait: n.Wait, started: n.started}
	files := nodeFiles{env: env, sys: n.Sys, local: local, cni: cni}
	survey := surveyor{env: env, port: port, bound: n.probeBound}
	n.u = &units{
		env:    env,
		survey: survey,
		cni:    cni,
		files:  files,
		plane: &controlPlane{env: env, files: files, api: api, cni: cni, wait: n.Wait, port: port,
			quorum: n.EtcdQuorum, leads: n.EtcdLeads, members: n.EtcdMembers},
		join: &masterJoin{env: env, survey: survey, beacon: &waitingBeacon{env: env, port: port}, api: api, cni: cni, files: files,
			etcd: etcdJoiner{env: env, startNode: files.startNode, bounds: n.joinBounds}, sys: n.Sys, wait: n.Wait, port: port},
		master:  asMaster{env: env, api: api, local: local, cni: cni, wait: n.Wait},
		kubelet: asKubelet{env: env, api: api, local: local, cni: cni, wait: n.Wait, version: n.Version, deferRoleDone: n.DeferRoleDone},
	}
	return n.u
}
